"""Issue 32: rendering rollout files (and results) to .mp4 / .gif videos, .png contact sheets and arrays,
headless on this machine's software EGL.

The bar: a box_on_plane rollout (16 worlds, 1000 steps, record every 10) renders to run.mp4 with
``--worlds 0:4 --layout grid --fps 25``; the video reads back with the expected frame count and size, its
frames are not blank and change over time, and rendering twice gives identical frames. A .png contact
sheet renders from a file whose source XML is gone. Sizes are kept small (160x120) so the suite stays fast.
"""

from __future__ import annotations

import math

import imageio.v3 as iio
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.integrators.errors import UserError
from mjharness.rollout import RenderError, initial_states, render, rollout
from mjharness.rollout.cli.app import main
from mjharness.rollout.cli.errors import is_user_error
from mjharness.rollout.rendering import gl
from mjharness.rollout.rendering.options import frame_samples, sheet_samples
from mjharness.scenes import load_scene

# imageio runs ffmpeg as a subprocess (fork + exec, no Python in the child): JAX's fork warning does not apply.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
SIZE = (160, 120)
BOX_XML = """<mujoco model="box_with_camera">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <camera name="side" pos="0 -1.2 0.4" xyaxes="1 0 0 0 0.3 1"/>
    <body name="box" pos="0 0 0.4">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" density="500"/>
    </body>
  </worldbody>
</mujoco>"""


def _dropped_spinning(scene, batch: int) -> np.ndarray:
    """Boxes dropped from 0.3..0.7 m, thrown and spinning: every world moves visibly, each differently."""
    x0 = initial_states(scene, batch)
    rng = np.random.default_rng(0)
    x0[:, 2] = 0.3 + 0.4 * rng.random(batch)
    x0[:, 7:10] = rng.normal(0.0, 0.5, (batch, 3))
    x0[:, 10:13] = rng.normal(0.0, 6.0, (batch, 3))
    return x0


@pytest.fixture(scope="session")
def box_file(tmp_path_factory):
    """The bar's rollout: box_on_plane, 16 worlds, 1000 steps recorded every 10 (MuJoCo C: no MJX compile)."""
    scene = MjScene("box_on_plane", backend="mujoco", threads=1)
    path = tmp_path_factory.mktemp("render") / "box.h5"
    res = rollout(scene, steps=1000, batch=16, x0=_dropped_spinning(scene, 16), record_every=10, out=str(path),
                  progress=False)
    assert res.qpos.shape == (100, 16, 7) and res.ok.all()
    return path


def _frames(path, **kw) -> np.ndarray:
    return render(path, None, worlds="0:4", size=SIZE, fps=25, progress=False, **kw)


# -- the bar -----------------------------------------------------------------------------------------------

def test_bar_mp4_grid_reads_back_with_its_frames(box_file, tmp_path):
    out = tmp_path / "run.mp4"
    argv = ["render", str(box_file), "--out", str(out), "--worlds", "0:4", "--layout", "grid", "--fps", "25",
            "--size", "x".join(map(str, SIZE)), "--no-progress"]
    assert main(argv) == 0
    video = iio.imread(out)
    expected = (0.02 * 99) * 25  # samples at 0.02 .. 2.0 s, 25 frames per simulated second
    assert abs(video.shape[0] - expected) <= 1
    assert video.shape[1:] == (SIZE[1], SIZE[0], 3)
    assert min(frame.std() for frame in video) > 5  # no blank frame
    # The boxes fall and tumble: far more than the time caption changes between the first and last frame.
    assert np.mean(np.any(video[0] != video[-1], axis=2)) > 0.05
    # The video holds the rendered frames (H.264 is lossy: close, not equal).
    frames = _frames(box_file)
    assert frames.shape == video.shape
    assert np.mean(np.abs(frames.astype(np.int16) - video)) < 6
    # Rendering twice gives identical frames, as arrays and through the encoder.
    again = tmp_path / "again.mp4"
    assert main(argv[:3] + [str(again)] + argv[4:]) == 0
    assert np.array_equal(iio.imread(again), video)
    assert np.array_equal(_frames(box_file), frames)


def test_sheet_png_renders_after_the_source_xml_is_gone(tmp_path):
    xml = tmp_path / "box_with_camera.xml"
    xml.write_text(BOX_XML)
    scene = MjScene(str(xml), backend="mujoco", threads=1)
    h5 = tmp_path / "gone.h5"
    rollout(scene, steps=200, batch=3, x0=_dropped_spinning(scene, 3), record_every=10, out=str(h5),
            progress=False)
    xml.unlink()
    sheet = tmp_path / "sheet.png"
    assert main(["render", str(h5), "--out", str(sheet), "--size", "320x240", "--no-progress"]) == 0
    image = iio.imread(sheet)
    assert image.shape == (240, 320, 3) and image.std() > 5
    # 4 time points (rows) x 3 worlds (columns): the tiles differ from each other.
    tiles = image[:, : 3 * (320 // 3)].reshape(4, 60, 3, 320 // 3, 3).swapaxes(1, 2)
    assert not np.array_equal(tiles[0, 0], tiles[3, 0]) and not np.array_equal(tiles[3, 0], tiles[3, 1])
    # The model's own camera, from the file's model.
    frames = render(h5, None, worlds=[0], camera="side", size=SIZE, fps=10, progress=False)
    assert frames.shape[1:] == (SIZE[1], SIZE[0], 3) and frames[-1].std() > 5


# -- layouts, cameras, outputs -------------------------------------------------------------------------------

def test_overlay_adds_the_other_worlds_to_the_first(box_file):
    one_grid = render(box_file, None, worlds=[0], layout="grid", size=SIZE, fps=5, progress=False)
    one_overlay = render(box_file, None, worlds=[0], layout="overlay", size=SIZE, fps=5, progress=False)
    four_overlay = render(box_file, None, worlds="0:4", layout="overlay", size=SIZE, fps=5, progress=False)
    assert np.array_equal(one_grid, one_overlay)  # one world: the same picture either way
    assert four_overlay.shape == one_overlay.shape
    assert np.mean(np.any(four_overlay[0] != one_overlay[0], axis=2)) > 0.02


def test_free_camera_follows_the_centre_of_mass(box_file):
    """box_on_plane's only mass is the box: the free camera and track:box look at the same point."""
    free = render(box_file, None, worlds=[2], size=SIZE, fps=5, progress=False)
    track = render(box_file, None, worlds=[2], camera="track:box", size=SIZE, fps=5, progress=False)
    assert np.array_equal(free, track)
    assert min(frame.std() for frame in free) > 5  # the box stays in view as it falls and slides


def test_gif_without_ffmpeg(box_file, tmp_path):
    out = render(box_file, tmp_path / "run.gif", worlds="1,5", size=SIZE, fps=5, progress=False)
    video = iio.imread(out)
    assert video.shape[0] == math.floor(1.98 * 5) + 1 and video.shape[1:3] == (SIZE[1], SIZE[0])


def test_result_renders_from_memory_with_its_model():
    scene = MjScene("box_on_plane", backend="mujoco", threads=1)
    res = rollout(scene, steps=200, batch=2, x0=_dropped_spinning(scene, 2), record_every=10, progress=False)
    with pytest.raises(RenderError, match="model="):
        render(res, None)
    # World 1 fails after sample 5: its non-finite states are not drawn (the tile keeps the floor alone).
    res.status, res.status_step = np.array([0, 1]), np.array([-1, 60])
    res.x[6:, 1] = np.nan
    frames = render(res, None, model=load_scene("box_on_plane"), size=SIZE, fps=10, progress=False)
    assert frames.shape == (math.floor((res.time[-1] - res.time[0]) * 10 + 1e-9) + 1, SIZE[1], SIZE[0], 3)
    right = frames[:, 20:, SIZE[0] // 2:]  # world 1's tile below the time caption
    assert not np.array_equal(right[0], right[-1]) and right[-1].std() < right[0].std()


def test_resampling_takes_the_nearest_recorded_sample():
    time = 0.02 * np.arange(1, 101)  # 0.02 .. 2.0 s
    idx = frame_samples(time, 25.0, 1.0, -math.inf, math.inf)
    assert len(idx) == 50 and idx[0] == 0 and idx[-1] == 98  # 1.98 s of video: frame 49 at 1.98 + 0.02
    assert np.all(np.abs(time[idx] - (0.02 + np.arange(50) / 25)) <= 0.01 + 1e-12)
    fast = frame_samples(time, 25.0, 2.0, -math.inf, math.inf)
    assert len(fast) == 25 and np.all(np.diff(fast) == 4)
    slow = frame_samples(time, 100.0, 1.0, -math.inf, math.inf)  # more frames than samples: repeats, no new states
    assert set(slow) <= set(range(100)) and len(slow) == 199
    window = frame_samples(time, 10.0, 1.0, 0.5, 1.0)
    assert time[window[0]] >= 0.5 and time[window[-1]] <= 1.0 + 1e-12 and len(window) == 6
    assert list(sheet_samples(time, 4, -math.inf, math.inf)) == [0, 33, 66, 99]


# -- errors: one RenderError, before anything is drawn or written --------------------------------------------

BAD = [
    ({"worlds": "0:20"}, "world 16 is out of range"),
    ({"worlds": "3,x"}, "worlds="),
    ({"camera": "nope"}, "no camera 'nope'"),
    ({"camera": "track:nobody"}, "no body 'nobody'"),
    ({"size": "161x120"}, "even"),
    ({"size": "banana"}, "WIDTHxHEIGHT"),
    ({"size": (8, 8)}, "16..4096"),
    ({"fps": 0}, "fps=0"),
    ({"speed": "-1"}, "speed="),
    ({"time": "3:1"}, "T0 < T1"),
    ({"time": "5:6"}, "holds no recorded sample"),
    ({"layout": "stack"}, "layout="),
    ({"sheet": 0}, "sheet="),
]


@pytest.mark.parametrize("kw, message", BAD, ids=[next(iter(k)) + "=" + str(next(iter(k.values()))) for k, _ in BAD])
def test_bad_options_raise_before_writing(box_file, tmp_path, kw, message):
    out = tmp_path / "run.mp4"
    with pytest.raises(RenderError, match=message) as info:
        render(box_file, out, progress=False, **kw)
    assert not out.exists()
    assert isinstance(info.value, ValueError) and isinstance(info.value, UserError) and is_user_error(info.value)


def test_cli_errors_are_one_paragraph_and_exit_2(box_file, tmp_path, capsys):
    for extra, what in ((["--out", str(tmp_path / "a.avi")], "unsupported extension '.avi'"),
                        (["--out", str(tmp_path / "a.mp4"), "--worlds", "0,99"], "world 99 is out of range"),
                        (["--out", str(tmp_path / "a.mp4"), "--camera", "wrist"], "no camera 'wrist'")):
        assert main(["render", str(box_file), *extra, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("mjharness render: error: ") and what in err
        assert "Traceback" not in err and "\n\n" not in err
    assert not list(tmp_path.iterdir())


def test_no_opengl_backend_is_one_clear_error(box_file, tmp_path, monkeypatch):
    monkeypatch.setattr(gl, "_chosen", [])
    monkeypatch.setattr(gl, "BACKENDS", {"egl": ("mjharness_no_such_egl", "EGL"),
                                         "osmesa": ("mjharness_no_such_osmesa", "OSMesa")})
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    out = tmp_path / "run.mp4"
    with pytest.raises(RenderError, match=r"tried EGL: .*; OSMesa: .*apt-get install libegl1") as info:
        render(box_file, out, size=SIZE, progress=False)
    assert is_user_error(info.value) and not out.exists()


def test_mujoco_gl_is_respected(monkeypatch):
    monkeypatch.setattr(gl, "_chosen", [])
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert gl.backend_order() == ("osmesa",)
    monkeypatch.setenv("MUJOCO_GL", "cgl")
    with pytest.raises(RenderError, match="MUJOCO_GL='cgl'"):
        gl.backend_order()
    monkeypatch.delenv("MUJOCO_GL")
    assert gl.backend_order() == ("egl", "osmesa")

