"""The CLI's name for the XLA log filter, which lives in ``mjharness.scenes.xla_log`` so that importing
``mjharness.adapters`` or ``mjharness.rollout`` installs it for library users too (see its docstring).
Its names load on first use: importing ``mjharness.scenes`` loads MuJoCo, which ``mjharness --help`` does not need."""

from __future__ import annotations

import importlib

__all__ = ["BENIGN", "is_benign", "drop_benign", "install", "uninstall", "ENV_VAR"]  # noqa: F822 - __getattr__


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("mjharness.scenes.xla_log"), name)
