"""``mjharness render FILE``: a rollout file to a video (.mp4, .gif) or a contact sheet (.png), headless.

    mjharness render run.h5 --out run.mp4 [--worlds 0:16 | 0,3,7] [--layout grid|overlay]
        [--camera free|track:<body>|NAME] [--size 640x480] [--fps 30] [--speed 1.0] [--time T0:T1]

The model comes from the file itself (``/model/mjb``). Options are checked by ``render`` (one
``RenderError`` paragraph, exit status 2) before anything is drawn or written.
"""

from __future__ import annotations

import os

from .common import RENDER_DEFAULTS, check_folder, import_mujoco
from .errors import CliError

DEFAULT_SIZE, DEFAULT_FPS = RENDER_DEFAULTS["size"], RENDER_DEFAULTS["fps"]
DEFAULT_SHEET_TIMES, LAYOUTS = RENDER_DEFAULTS["sheet_times"], RENDER_DEFAULTS["layouts"]


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="render a rollout file to a video or a contact sheet (headless)",
                       description="Render the worlds of rollout FILE with the model it holds: .mp4 / .gif "
                                   "videos, or a .png contact sheet (time points x worlds). Headless: EGL, "
                                   "else OSMesa; MUJOCO_GL chooses.")
    p.add_argument("file")
    p.add_argument("--out", help="output .mp4, .gif or .png (contact sheet); default FILE with .mp4")
    p.add_argument("--worlds", help="worlds: START:STOP (e.g. 0:16) or indices (e.g. 0,3,7); default 0:4")
    p.add_argument("--layout", choices=LAYOUTS, default="grid",
                   help="grid: a tile per world; overlay: the worlds in one scene, all but the first translucent")
    p.add_argument("--camera", default="free",
                   help="free (the worlds' centre of mass), track:<body>, or a camera of the model (default free)")
    p.add_argument("--size", default="x".join(map(str, DEFAULT_SIZE)),
                   help="WIDTHxHEIGHT of a frame, or of the whole sheet (default %(default)s)")
    p.add_argument("--fps", default=DEFAULT_FPS, help="video frames per second (default %(default)g)")
    p.add_argument("--speed", default=1.0, help="simulated seconds per video second (default %(default)g)")
    p.add_argument("--time", metavar="T0:T1", help="simulated interval shown, e.g. 0.5:2 or 1: (default all)")
    p.add_argument("--sheet", default=DEFAULT_SHEET_TIMES,
                   help="time points in a .png contact sheet (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def command(args) -> int:
    out = args.out or os.path.splitext(args.file)[0] + ".mp4"
    if not os.path.isfile(args.file):
        raise CliError(f"{args.file}: no such file")
    ext = os.path.splitext(out)[1].lower()
    if ext not in RENDER_DEFAULTS["outputs"]:
        raise CliError(f"--out {out}: unsupported extension {ext!r}; use one of "
                       f"{', '.join(RENDER_DEFAULTS['outputs'])} (.png writes a contact sheet)")
    check_folder(out, "--out")  # before a frame is drawn: a missing folder used to fail after all of them
    import_mujoco(args)
    from mjharness.rollout.rendering import render

    path = render(args.file, out, worlds=args.worlds, layout=args.layout, camera=args.camera, size=args.size,
                  fps=args.fps, speed=args.speed, time=args.time, sheet=args.sheet, progress=not args.no_progress)
    print(f"render: {path}")
    return 0
