"""Plots a reader can read (issue 29, item 8): units and names on the axes, a legend per panel naming the
components (x/y/z, quaternion w/x/y/z, sensor columns, contact pairs by geom names), the chosen worlds in
the title, and a mean ± band view. Checked on the Matplotlib Figure that ``plots.figure`` returns."""

import mujoco
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from mjharness.adapters import MjScene
from mjharness.rollout import open_rollout, rollout
from mjharness.rollout.cli import main, plots
from mjharness.rollout.cli.errors import CliError

# A free ball on a floor (one ball-floor contact pair) carrying a hinge arm, with an accelerometer and a
# frame quaternion: every kind of component label in one small file.
XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="ball" pos="0 0 0.1">
      <freejoint name="free"/>
      <geom name="ballg" type="sphere" size="0.1" mass="1"/>
      <site name="imu" pos="0 0 0.1"/>
      <body name="arm" pos="0 0 0.1">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0.1" size="0.02" mass="0.2" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <sensor>
    <accelerometer name="acc" site="imu"/>
    <framequat name="att" objtype="body" objname="ball"/>
  </sensor>
</mujoco>"""
B = 6


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("plots") / "p.h5"
    # MuJoCo C: no compile; velocities perturbed so that worlds differ (the band has a width)
    rollout(MjScene(mujoco.MjModel.from_xml_string(XML), backend="mujoco"), steps=40, batch=B, perturb=0.5,
            record_every=4, out=str(p), progress=False, outputs=("sensordata", "xpos", "energy", "contact_force"))
    return str(p)


def _legend(ax) -> list:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_axes_legends_and_title_name_what_is_drawn(path):
    with open_rollout(path) as f:
        fig = plots.figure(f, ["sensor:acc", "sensor:att", "xpos:arm", "free/quat", "hinge/qvel", "energy",
                               "contact_force"], worlds=[0, 2])
    ax = fig.axes[:7]
    assert [a.get_ylabel() for a in ax] == ["sensor:acc [m/s²]", "sensor:att", "xpos:arm [m]", "free/quat",
                                            "hinge/qvel [rad/s]", "energy [J]", "contact_force [N]"]
    assert _legend(ax[0]) == ["x", "y", "z"]
    assert _legend(ax[1]) == ["w", "x", "y", "z"]
    assert _legend(ax[2]) == ["x", "y", "z"]
    assert _legend(ax[3]) == ["w", "x", "y", "z"]
    assert _legend(ax[4]) == ["hinge"]
    assert _legend(ax[5]) == ["potential", "kinetic"]
    assert _legend(ax[6]) == ["floor–ballg"]
    assert ax[-1].get_xlabel() == "time [s]"
    title = fig.get_suptitle()
    assert "p.h5" in title and "worlds 0, 2 of 6" in title
    assert len(ax[0].lines) == 2 * 3  # two worlds, three components


def test_default_worlds_and_ranges_in_the_title(path):
    with open_rollout(path) as f:
        assert "worlds 0–5 of 6" in plots.figure(f, ["qpos"]).get_suptitle()
        assert "worlds 1–3 of 6" in plots.figure(f, ["qpos"], worlds=plots.parse_worlds(["1:4"], B)).get_suptitle()
        assert plots.parse_worlds(["0,3", "5"], B) == [0, 3, 5]
        with pytest.raises(CliError, match="worlds 0..5"):
            plots.parse_worlds(["4:9"], B)
        fig = plots.figure(f, ["qpos"], worlds=[1])
    legend = _legend(fig.axes[0])  # one entry per qpos coordinate, named by joint (the file's labels if it has them)
    assert len(legend) == 8 and all(s.startswith("free") for s in legend[:7]) and legend[7].startswith("hinge")
    assert "world 1 of 6" in fig.get_suptitle()


def test_band_is_mean_and_std_over_worlds(path):
    with open_rollout(path) as f:
        fig = plots.figure(f, ["hinge/qvel", "xpos:ball"], band=True)
        qvel = f.state("hinge/qvel")[:, :, 0]
    ax = fig.axes[0]
    assert "mean ± std over worlds 0–5 of 6" in fig.get_suptitle()
    assert _legend(ax) == ["hinge mean"] and _legend(fig.axes[1]) == ["x mean", "y mean", "z mean"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), qvel.mean(axis=1))
    band = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(band) == 1
    verts = band[0].get_paths()[0].vertices[:, 1]
    assert np.isclose(verts.max(), (qvel.mean(axis=1) + qvel.std(axis=1)).max())
    assert qvel.std(axis=1).max() > 0  # the worlds differ, so the band is not a line


def test_show_writes_the_png(path, tmp_path, capsys):
    png = tmp_path / "p.png"
    assert main(["show", path, "--plot", "sensor:acc", "xpos:arm", "--worlds", "0:3", "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "plot:" in capsys.readouterr().out
    assert main(["show", path, "--plot", "qvel", "--band", "--png", str(png)]) == 0
    assert main(["show", path, "--plot", "qvel", "--worlds", "7", "--png", str(png)]) == 2
    assert "the file has worlds 0..5" in capsys.readouterr().err
