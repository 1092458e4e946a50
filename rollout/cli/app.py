"""The ``mjharness`` program: the parser of every command module, and running one command.

Each command module has ``add_parser(subparsers)``, which adds its subparser and sets ``func`` (the
handler, ``args -> exit status``) and ``subject`` (``args -> "scene 'humanoid'"``, named in error
paragraphs). A handler raises on failure; ``dispatch`` turns the exception into the paragraph of
``errors`` (exit status 2), or prints the traceback with ``--debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback

from mjharness.rollout.engine.interrupts import Terminated

from . import (
    bench,
    cases,
    check,
    errors,
    examples,
    export,
    fit,
    hangrepro,
    inspect,
    probe,
    render,
    replay,
    rerun,
    run,
    show,
    verify,
    xla_log,
)
from .common import import_mujoco

__all__ = ["COMMANDS", "build_parser", "dispatch", "main"]

COMMANDS = (run, show, inspect, check, cases, bench, hangrepro, fit, render, verify, probe, examples, rerun,
            export, replay)
# Commands that check their arguments before MuJoCo loads, and import it themselves afterwards (import_mujoco).
CHECK_FIRST = ("run", "render", "show")
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
    """Run the parsed command; any exception becomes one paragraph on stderr and exit status 2; an interrupt
    one line and 130 (SIGINT) / 143 (SIGTERM); a closed stdout (``| head``) nothing and 141."""
    try:
        if args.command not in CHECK_FIRST:
            import_mujoco(args)
        with _jax_tracebacks(args.debug), _warnings_as_lines(args.command, args.debug):
            return int(args.func(args) or 0)
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM (interrupts.Terminated): the writer closed the file in between
        return interrupted(e, args.command, _file_state(args))
    except BrokenPipeError:
        return closed_pipe()
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        elif errors.is_user_error(e):
            print(f"mjharness {args.command}: error: {errors.user_message(e)}", file=sys.stderr)
        else:
            subject = getattr(args, "subject", None)
            print(errors.explain(e, args.command, subject(args) if subject else None), file=sys.stderr)
        return 2


@contextlib.contextmanager
def _warnings_as_lines(command: str, debug: bool):
    """A warning as one line in the command's name (``mjharness run: warning: ...``), not Python's two lines with
    the internal source line that raised it (``--debug`` keeps Python's format)."""
    import warnings

    if debug:
        yield
        return
    before = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *rest, **kw: f"mjharness {command}: warning: {message}\n"
    try:
        yield
    finally:
        warnings.formatwarning = before


@contextlib.contextmanager
def _jax_tracebacks(debug: bool):
    """Keep JAX's own frames in tracebacks (unless ``--debug``), so ``errors.origin`` can tell who failed.
    JAX is not imported for this: until a command imports it, the environment variable it reads says so."""
    if debug:
        yield
        return
    jax = sys.modules.get("jax")
    if jax is None:
        before = os.environ.get("JAX_TRACEBACK_FILTERING")
        os.environ["JAX_TRACEBACK_FILTERING"] = "tracebackhide"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("JAX_TRACEBACK_FILTERING", None)
            else:
                os.environ["JAX_TRACEBACK_FILTERING"] = before
        return
    filtering = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "tracebackhide")
    try:
        yield
    finally:
        jax.config.update("jax_traceback_filtering", filtering)


def interrupted(e: KeyboardInterrupt, command: str | None, state: str = "") -> int:
    """One line for an interrupt (Ctrl-C or SIGTERM) at any moment, imports included; the exit status."""
    what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    try:
        print(f"mjharness{' ' + command if command else ''}: {what}{state}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass
    return 143 if isinstance(e, Terminated) else 130


def closed_pipe() -> int:
    """stdout's reader went away (``mjharness show f | head -1``): stop quietly, as ``cat`` does (exit 141,
    128 + SIGPIPE). stdout is pointed at /dev/null so that the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141


def _file_state(args) -> str:
    """'; FILE holds N of T samples (complete=False): --resume FILE continues it' for a run with a file."""
    path = getattr(args, "resume", None) or getattr(args, "out", None)
    if args.command != "run" or not path:
        return ""
    if not os.path.exists(path):
        return f"; nothing was written to {path}"
    try:
        from mjharness.rollout.h5 import open_rollout

        with open_rollout(path) as f:
            return (f"; {path} holds {f.samples} of {f.h5['x'].shape[0]} samples (complete={f.complete}): "
                    f"`mjharness run --resume {path}` continues it")
    except Exception as e:  # noqa: BLE001 - the message is a courtesy; the file may not exist yet
        return f"; {path}: {e}"


def main(argv=None) -> int:
    """``mjharness [--debug] COMMAND ...``; no command: ``run``. Run as the program (``argv`` None),
    the known-benign XLA log lines are filtered from stderr (``xla_log``) unless ``--debug``.
    SIGINT and SIGTERM (``engine.interrupts``) unwind from the first moment (imports and compiles included),
    so either ends in one line and exit status 130 / 143, never a traceback."""
    from mjharness.rollout.engine import interrupts

    program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    restore = interrupts.install(keep_pending=program)  # as the program, entry.main installed them first
    command = None
    try:
        parser = build_parser()
        if not [a for a in argv if a != "--debug"]:
            argv = argv + ["run"]  # `mjharness` alone: the README's first command
        args = parser.parse_args(argv)
        command = args.command
        if program and not args.debug:
            args.xla_filter = True  # installed with MuJoCo (common.import_mujoco), after the arguments are checked
        elif program:
            xla_log.uninstall()  # --debug: every XLA line (configure() will not install the filter)
        rc = dispatch(args)
        signum = interrupts.pending()
        if rc not in (130, 143) and signum:  # a signal a gc callback swallowed: still an interrupt
            return interrupted(interrupts.exception(signum), command, _file_state(args))
        return rc
    except KeyboardInterrupt as e:  # before the command ran (parsing, the XLA log filter)
        return interrupted(e, command)
    except BrokenPipeError:  # --help into a closed pipe
        return closed_pipe()
    finally:
        restore()
