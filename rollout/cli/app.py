"""The ``mjharness`` program: the parser of every command module, and running one command.

Each command module has ``add_parser(subparsers)``, which adds its subparser and sets ``func`` (the
handler, ``args -> exit status``) and ``subject`` (``args -> "scene 'humanoid'"``, named in error
paragraphs). A handler raises on failure; ``dispatch`` turns the exception into the paragraph of
``errors`` (exit status 2), or prints the traceback with ``--debug``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback

from . import bench, cases, check, errors, fit, hangrepro, inspect, probe, render, rerun, run, show, verify, xla_log

__all__ = ["COMMANDS", "build_parser", "dispatch", "main"]

COMMANDS = (run, show, inspect, check, cases, bench, hangrepro, fit, render, verify, probe, rerun)
_DEBUG_HELP = "on an error print the traceback instead of a summary, and every XLA log line"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mjharness", description="Batched MuJoCo/MJX rollouts with our integrators.")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    for p in sub.choices.values():  # `mjharness run ... --debug` as well as `mjharness --debug run ...`
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    return parser


def dispatch(args) -> int:
    """Run the parsed command; any exception becomes one paragraph on stderr and exit status 2."""
    import jax

    filtering = jax.config.jax_traceback_filtering
    if not args.debug:  # keep JAX's own frames in tracebacks, so errors.origin can tell who failed
        jax.config.update("jax_traceback_filtering", "tracebackhide")
    previous = signal.signal(signal.SIGTERM, _terminate) if _main_thread() else None
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM through _terminate: the writer closed the file in between
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"mjharness {args.command}: {what}{_file_state(args)}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        elif errors.is_user_error(e):
            print(f"mjharness {args.command}: error: {errors.user_message(e)}", file=sys.stderr)
        else:
            subject = getattr(args, "subject", None)
            print(errors.explain(e, args.command, subject(args) if subject else None), file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        jax.config.update("jax_traceback_filtering", filtering)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the run unwinds like Ctrl-C: the writer closes its file."""


def _terminate(signum, frame):
    raise Terminated()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _file_state(args) -> str:
    """'; FILE holds N of T samples (complete=False): --resume FILE continues it' for a run with a file."""
    path = getattr(args, "resume", None) or getattr(args, "out", None)
    if args.command != "run" or not path:
        return ""
    try:
        from mjharness.rollout.h5 import open_rollout

        with open_rollout(path) as f:
            return (f"; {path} holds {f.samples} of {f.h5['x'].shape[0]} samples (complete={f.complete}): "
                    f"`mjharness run --resume {path}` continues it")
    except Exception as e:  # noqa: BLE001 - the message is a courtesy; the file may not exist yet
        return f"; {path}: {e}"


def main(argv=None) -> int:
    """``mjharness [--debug] COMMAND ...``; no command: ``run``. Run as the program (``argv`` None),
    the known-benign XLA log lines are filtered from stderr (``xla_log``) unless ``--debug``."""
    program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not [a for a in argv if a != "--debug"]:
        argv = argv + ["run"]  # `mjharness` alone: the README's first command
    args = parser.parse_args(argv)
    if program and not args.debug:
        xla_log.install()
    elif program:
        xla_log.uninstall()  # --debug: every XLA line (importing mjharness installed the filter)
    return dispatch(args)
