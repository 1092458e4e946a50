"""The ``mjharness`` program's entry point (``[project.scripts]``): SIGINT and SIGTERM are handled before the
CLI's own modules are imported, so an interrupt at any moment after Python starts ends in one line and exit
status 130 / 143 (``engine.interrupts``), never a traceback of whatever was being imported."""

from __future__ import annotations

import sys


def main() -> int:
    from mjharness.rollout.engine import interrupts

    interrupts.install()  # app.main installs them again (and restores these when it returns)
    try:
        from .app import main as run
    except KeyboardInterrupt as e:
        stopped = isinstance(e, interrupts.Terminated)
        print(f"mjharness: {'terminated (SIGTERM)' if stopped else 'interrupted'}", file=sys.stderr)
        return 143 if stopped else 130
    return run()
