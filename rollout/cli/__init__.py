"""The ``mjharness`` command line: one module per command, argparse only here.

    mjharness run [SCENE] [--integrator NAME] [--dt DT] ...   roll a scene out, stream HDF5 (``run``)
    mjharness show FILE [--plot STATE ...]                    a file's attributes, layout, plots (``show``)
    mjharness inspect [SCENE]                                 a scene's states and MJX log (``inspect``)
    mjharness check FILE [--reference model|mujoco|REF.h5]    cross-check a file (``check``)
    mjharness cases [NAME ...]                                the check-case suite (``cases``)
    mjharness bench [SCENE ...]                               throughput vs raw MJX and MuJoCo C (``bench``)
    mjharness hangrepro ...                                   the issue-9 reproduction (``hangrepro``)
    mjharness [--debug] COMMAND ...                           --debug: tracebacks and every XLA log line

``app`` builds the parser and runs a command; ``errors`` turns any exception into one paragraph
(exit status 2); ``xla_log`` drops the known-benign XLA log lines from stderr. A command module has
``add_parser(subparsers)`` and imports the library it drives (``engine``, ``h5``, ``verify``,
``bench``, ``diagnostics``) inside its handler, so ``mjharness --help`` stays light; ``entry`` is the
program's entry point (signals handled before anything else is imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mjharness.integrators import lazy

if TYPE_CHECKING:  # loaded on first use: the program's entry point (``entry``) imports this package first
    from .app import build_parser, main
    from .errors import CliError

__all__ = ["main", "build_parser", "CliError"]

__getattr__, __dir__ = lazy.attach(__name__, __file__, __all__)
