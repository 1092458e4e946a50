"""The CLI's name for the XLA log filter, which lives in ``mjharness.scenes.xla_log`` so that importing
``mjharness.adapters`` or ``mjharness.rollout`` installs it for library users too (see its docstring)."""

from mjharness.scenes.xla_log import BENIGN, ENV_VAR, drop_benign, install, is_benign, uninstall

__all__ = ["BENIGN", "is_benign", "drop_benign", "install", "uninstall", "ENV_VAR"]
