"""Older import path of the MuJoCo C backend's host machinery (now ``adapters/backends/host.py``)."""

from .backends.base import BackendError
from .backends.host import HostData, HostOutputs, HostPool, default_threads, make_evaluator, make_output_evaluator

__all__ = ["BackendError", "HostData", "HostOutputs", "HostPool", "default_threads", "make_evaluator",
           "make_output_evaluator"]
