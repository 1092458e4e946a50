"""The CLI's name for the XLA log filter, which lives in ``mjharness.scenes.xla_log`` so that ``configure()``
installs it for library users too (see its docstring).
Its names load on first use: importing ``mjharness.scenes`` loads MuJoCo, which ``mjharness --help`` does not need."""

from __future__ import annotations

import importlib
import os
import sys

__all__ = ["BENIGN", "is_benign", "drop_benign", "install", "uninstall", "ENV_VAR"]  # noqa: F822 - __getattr__

ENV_VAR = "MJHARNESS_XLA_LOG"  # scenes.xla_log.ENV_VAR (tests/test_cli_second_hour.py checks they agree)
_MODULE = "mjharness.scenes.xla_log"


def uninstall() -> None:
    """Every XLA line (``--debug``): the filter off now, and not installed later, when ``configure()`` sets the
    process up (the command calls it after this runs)."""
    os.environ[ENV_VAR] = "all"
    if _MODULE in sys.modules:
        sys.modules[_MODULE].uninstall()


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE), name)
