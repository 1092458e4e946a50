"""Small pieces several commands print with: a scene's one-line label, byte sizes, the layout table; the
check of an output path's folder."""

from __future__ import annotations

import os
import tempfile
from typing import TypedDict

# The run spec's allowed values (it loads neither JAX nor MuJoCo: the enums of integrators/names.py, and copies that
# tests/test_spec_options.py checks against the tables of the modules that use them).
from mjharness.integrators.names import BackendName
from mjharness.rollout.engine.spec import AUTO, BACKEND_NAMES, CONTACT_MODES, MJX_MODES, QUATERNION_UPDATES

__all__ = ["AUTO", "BACKEND_NAMES", "CONTACT_MODES", "MJX_MODES", "QUATERNION_UPDATES", "BACKEND_SUMMARIES",
           "DEFAULT_SCENE"]

DEFAULT_SCENE = "box_on_plane"

# The backends' one-line summaries as ``mjharness.adapters.backends.BACKENDS`` declares them, copied here so that
# building the parser imports no JAX (tests/test_cli_second_hour.py checks that the two agree).
BACKEND_SUMMARIES = {
    BackendName.MJX.value: "MJX (JAX): differentiable, per-world parameters; the GPU/TPU path",
    BackendName.MUJOCO.value: "MuJoCo C on CPU threads: runs models MJX refuses; the fastest on CPU; "
                              "not differentiable",
    BackendName.WARP.value: "MJX impl='warp' (MuJoCo Warp kernels, float32; needs mjharness[warp])",
}
# mjharness.rollout.rendering's defaults, copied for the same reason (it imports MuJoCo; the test checks them).
class RenderDefaults(TypedDict):
    size: tuple[int, int]
    fps: float
    sheet_times: int
    layouts: tuple[str, ...]
    outputs: tuple[str, ...]


RENDER_DEFAULTS = RenderDefaults(size=(640, 480), fps=30.0, sheet_times=4, layouts=("grid", "overlay"),
                                 outputs=(".mp4", ".gif", ".png"))


def scene_label(scene) -> str:
    """A scene argument as one line: a name or path as given, a whole XML string shortened."""
    one = " ".join(str(scene).split())
    return one if len(one) < 60 or "<" not in one else one[:57] + "..."


def print_layout(rows) -> None:
    """Rows of ``StateLayout.describe()`` (or the file's ``/layout`` table), one state a line."""
    print(f"  {'state':28s} {'update':20s} {'value':>11s} {'deriv':>11s}  joint")
    for r in rows:
        print(f"  {r['name']:28s} {r['update']:20s} {r['offset']:>5d}+{r['size']:<5d} "
              f"{r['deriv_offset']:>5d}+{r['deriv_size']:<5d}  {r.get('joint') or '-'}")


def check_folder(path: str, flag: str) -> None:
    """Refuse an output ``path`` whose folder is missing, is not a folder, or takes no new file (read-only,
    /proc), and a ``path`` that is a folder: before anything loads, compiles or renders. The probe is an
    anonymous temporary file, gone when closed, so nothing is left behind."""
    from .errors import CliError

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CliError(f"{flag} {path}: is a folder; give a file name in it")
    if not os.path.exists(folder):
        raise CliError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.path.isdir(folder):
        raise CliError(f"{flag} {path}: {folder} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise CliError(f"{flag} {path}: cannot write in {folder} ({e.strerror or e})") from None


def import_mujoco(args=None) -> None:
    """What a command needs once its arguments are checked: the XLA log filter (the program without --debug:
    ``args.xla_filter``; it lives in ``mjharness.scenes``, which loads MuJoCo) and MuJoCo, imported with
    SIGINT/SIGTERM held: its import runs GLFW's version probe as a child Python, which a terminal's Ctrl-C (sent
    to the whole process group) would stop with a traceback of its own."""
    from mjharness.rollout.engine import interrupts

    with interrupts.held():
        import mujoco  # noqa: F401
    if getattr(args, "xla_filter", False):
        from . import xla_log

        xla_log.install()
