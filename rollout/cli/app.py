"""The ``mjharness`` program: the parser of every command module, and running one command.

Each command module has ``add_parser(subparsers)``, which adds its subparser and sets ``func`` (the
handler, ``args -> exit status``) and ``subject`` (``args -> "scene 'humanoid'"``, named in error
paragraphs). A handler raises on failure; ``dispatch`` turns the exception into the paragraph of
``errors`` (exit status 2), or prints the traceback with ``--debug``.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from . import bench, cases, check, errors, fit, hangrepro, inspect, probe, render, run, show, xla_log

__all__ = ["COMMANDS", "build_parser", "dispatch", "main"]

COMMANDS = (run, show, inspect, check, cases, bench, hangrepro, fit, render, probe)
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
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        hint = " (the file holds every flushed chunk; --resume continues it)" if args.command == "run" else ""
        print(f"mjharness {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
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
        jax.config.update("jax_traceback_filtering", filtering)


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
