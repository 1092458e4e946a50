"""Diagnostics: the device-call watchdog (a stall becomes an error, not a hang) and the reproduction of
the batched-MJX hang of jax 0.10 (``hangrepro``, imported on use: it loads MuJoCo and MJX)."""

from .watchdog import DEFAULT_TIMEOUT_S, ENV_VAR, DeviceStallError, Watchdog, call_with_watchdog, watchdog_timeout

__all__ = ["DeviceStallError", "Watchdog", "call_with_watchdog", "watchdog_timeout", "DEFAULT_TIMEOUT_S", "ENV_VAR"]
