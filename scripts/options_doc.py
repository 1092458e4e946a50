"""Write docs/options.md, the option reference, from the run spec's table (rollout/engine/spec.py).

    python scripts/options_doc.py          # rewrite docs/options.md
    python scripts/options_doc.py --check  # exit 1 when docs/options.md is out of date (tests do this too)
"""

from __future__ import annotations

import pathlib
import sys

from mjharness.rollout.engine import spec

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "options.md"
TITLES = {None: "The run", "start": "Start", "recording": "Recording", "storage": "Storage",
          "execution": "Execution", "loading": "Loading"}
RESUME = {spec.Resume.NONE: "", spec.Resume.FILE: "the file's unless given",
          spec.Resume.MATCH: "the file's; a given value must match"}


def _cell(text: str) -> str:
    # | ends a cell; [ and ] would read as link references (field[:name][[i]])
    return str(text).replace("|", "\\|").replace("\n", " ").replace("[", "\\[").replace("]", "\\]")


def _row(name: str) -> str:
    o, d = spec.OPTIONS[name], spec.DEFAULTS[name]
    default = "required" if name == "steps" else f"`{d!r}`"
    if o.cli and o.cli_default is not None:
        default += f" (CLI `{o.cli_default!r}`)"
    flag = f"`{spec.cli_flag(name)}`" if o.cli else "—"
    combos = "; ".join(f"{n.text} (`{n.option}`)" for n in o.needs)
    attr = {None: "", "always": "yes", "if set": "when set"}[o.attr]
    cells = (f"`{name}`", flag, o.kind.describe(), default, o.unit, _cell(o.doc), combos, attr, RESUME[o.resume])
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def page() -> str:
    lines = ["# Run options", "",
             "Every option of `rollout()` and `mjharness run`, generated from the run spec's table "
             "(`rollout/engine/spec.py`, by `scripts/options_doc.py`): its type and range, default, unit, "
             "the options it needs, whether the file records it as a root attribute, and what a resume does "
             "with it. A value outside its type or range, an unknown option (with the closest name) or a "
             "combination without effect is one `RolloutError` naming the option, raised before anything is "
             "loaded, compiled or written; on the command line the same message names the flag.", "",
             "`steps` must be a multiple of `record_every` (the file never claims steps it did not record).",
             "",
             "Options whose flag is `—` are keywords of `rollout()` only; the command line gives their values "
             "through its own flags (`--out`, `--resume`, `--ctrl`, `--controller`, `--terminate`, `--reward`, "
             "`--param`, `--integrator`, `--dtype`: [Command line](cli.md)).", ""]
    for group, title in TITLES.items():
        names = [n for n, g in spec.OPTION_GROUP.items() if g == group]
        lines += [f"## {title}", "",
                  "| option | flag | type | default | unit | meaning | needs | file attribute | resume |",
                  "|---|---|---|---|---|---|---|---|---|", *map(_row, names), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        ok = PAGE.exists() and PAGE.read_text() == text
        print("docs/options.md is up to date" if ok else "docs/options.md is out of date: "
              "python scripts/options_doc.py")
        return 0 if ok else 1
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
