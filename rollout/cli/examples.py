"""``mjharness examples``: the examples that ship with the package, what each shows and its commands.

    mjharness examples            # every bundled example: its file, first docstring line and commands
    mjharness examples arm_reach  # one example's whole docstring

A bundled example's functions are named without a path: ``--controller arm_reach:make``.
"""

from __future__ import annotations

import ast

from .errors import CliError
from .loaders import bundled_examples


def add_parser(sub) -> None:
    p = sub.add_parser("examples", help="list the bundled examples (--controller arm_reach:make uses one)",
                       description="List the examples that ship with mjharness, with the commands each is made for.")
    p.add_argument("name", nargs="?", help="one example: print its whole docstring and its file")
    p.set_defaults(func=command, subject=lambda args: f"example {args.name}" if args.name else "the examples")


def docstring(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


def commands(doc: str) -> list[str]:
    """The docstring's indented ``mjharness ...`` lines."""
    return [line.strip() for line in doc.splitlines() if line.strip().startswith("mjharness ")]


def command(args) -> int:
    found = bundled_examples()
    if args.name:
        if args.name not in found:
            raise CliError(f"no bundled example {args.name!r} (bundled: {', '.join(found)})")
        print(f"{args.name}: {found[args.name]}\n")
        print(docstring(found[args.name]))
        return 0
    for name, path in found.items():
        doc = docstring(path)
        print(f"{name}: {doc.splitlines()[0] if doc else ''}")
        print(f"  file {path}")
        for line in commands(doc):
            print(f"  {line}")
    return 0
