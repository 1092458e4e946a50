"""Files every reader opens (issue 39, parts 1, 2, 3, 5): the bar's five kinds of file, written once, read by
xarray's netCDF4 and h5netcdf engines (named axes, no skipped variable, CF attributes), by an older HDF5 (h5py
3.10 / HDF5 1.14 in a throwaway venv, Debian's h5dump 1.10) bit for bit, by ``to_xarray`` while written and
``to_pandas``; ``mjharness rerun`` reproduces a controller run bit for bit on MuJoCo C.

The older readers are outside this environment: ``MJHARNESS_OLD_H5PY_PYTHON`` names the python of a venv with the
older h5py (``.ci/run`` makes one), ``h5dump`` is found on PATH; without them those tests skip and say why."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import cached_scene

from mjharness.rollout import Controller, h5, open_rollout, rollout
from mjharness.rollout.cli.app import main as cli_main
from mjharness.rollout.engine import distributed as D
from mjharness.rollout.engine.plan import resolve_scene
from mjharness.rollout.engine.spec import RunSpec, check_spec
from mjharness.rollout.h5.frames import is_dimension_only
from mjharness.rollout.h5.join import join_shards, shard_paths

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from h5_digests import file_digests  # noqa: E402

QUIET = dict(progress=False, backend="mujoco")
BOX = """<mujoco model="boxes"><option timestep="0.002"/><worldbody>
<geom name="floor" type="plane" size="5 5 0.1"/>
<body name="box" pos="0 0 0.1"><freejoint name="box"/><geom name="box" type="box" size="0.1 0.1 0.1" mass="1"/>
<site name="top" pos="0 0 0.1"/></body></worldbody>
<sensor><framepos name="top" objtype="site" objname="top"/><accelerometer name="acc" site="top"/>
<velocimeter name="vel" site="top"/></sensor></mujoco>"""
# A module the controller run imports by file, as `mjharness run --controller FILE.py:NAME` does.
CONTROLLER = '''import numpy as np
KP = 2.0
def init(x0):
    return {"integral": np.zeros(4)}
def step(t, x, c):
    e = 0.3 - x[:4]
    return KP * e - 0.2 * x[4:8], {"integral": c["integral"] + e}
def still(t, x):
    return t > 0.02
'''


def _module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"mjharness_user.{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def bar_files(tmp_path_factory):
    """The bar's small files, written once: plain, outputs, closed loop with resets, randomized, joined (and a
    resumed one)."""
    d = tmp_path_factory.mktemp("bar")
    (d / "loop_ctrl.py").write_text(CONTROLLER)
    ctl = _module(d / "loop_ctrl.py")
    paths = {k: str(d / f"{k}.h5") for k in ("plain", "outputs", "loop", "random", "joined", "resumed")}
    rollout(cached_scene("double_pendulum"), None, steps=6, batch=2, out=paths["plain"], **QUIET)
    # a resume reopens the file for writing: what it adds must stay in the 1.10 format too
    rollout(cached_scene("double_pendulum"), None, steps=4, batch=2, chunk=2, out=paths["resumed"], **QUIET)
    rollout(cached_scene("double_pendulum"), None, steps=8, chunk=2, resume=paths["resumed"], **QUIET)
    rollout(BOX, None, steps=6, batch=2, out=paths["outputs"],
            outputs=("sensordata", "contact_force", "contacts:2", "energy"), **QUIET)
    rollout(cached_scene("arm"), "semi_implicit_euler", steps=20, batch=2, ctrl=Controller(ctl.init, ctl.step),
            terminate=ctl.still, on_terminate="reset", out=paths["loop"], **QUIET)
    rollout(cached_scene("double_pendulum"), None, steps=6, batch=3, randomize={"body_mass:link1": "uniform(0.5, 1.5)"},
            out=paths["random"], **QUIET)
    scene = resolve_scene(BOX, backend="mujoco", need_sensors=True)
    spec = check_spec(RunSpec.from_options(batch=4, steps=6, out=paths["joined"], progress=False,
                                           outputs=("sensordata",)))
    scene, spec = D._local_scene_spec(scene, spec, 0)
    for k in range(2):  # the shards of a 2-process run, made in turn as distributed_rollout makes them
        plan, resumed = D._plan_shard(scene, None, spec, joined=paths["joined"], k=k, n=2)
        D._run_shard(plan, spec, resumed, progress=False)
    join_shards(paths["joined"], shard_paths(paths["joined"], 2))
    return paths


def _variables(g) -> set:
    """The datasets of a group a netCDF reader shows as variables (not the axes stored without values)."""
    return {k for k, v in g.items() if isinstance(v, h5py.Dataset) and not is_dimension_only(v)}


def _groups(path: str) -> dict:
    """{group path: names of its variables} of every group of the file."""
    with h5py.File(path, "r") as f:
        out = {"/": _variables(f)}
        f.visititems(lambda n, o: out.__setitem__("/" + n, _variables(o)) if isinstance(o, h5py.Group) else None)
    return out


def _with_shards(bar_files: dict) -> list[str]:
    """The bar's files and the shards beside the joined one."""
    return sorted(p for path in bar_files.values() for p in [path] + sorted(
        str(s) for s in Path(path).parent.glob(Path(path).name + ".p*-of-*.h5")))


# -- netCDF / CF ------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_xarray_engines_open_every_group_with_named_axes_and_units(bar_files, engine):
    xr = pytest.importorskip("xarray")
    pytest.importorskip({"netcdf4": "netCDF4", "h5netcdf": "h5netcdf"}[engine])
    for path in _with_shards(bar_files):
        kind = Path(path).name
        for group, names in _groups(path).items():
            with xr.open_dataset(path, engine=engine, group=group) as ds:
                ds.load()
                where = f"{kind} {group} ({engine})"
                assert set(ds.variables) == names, where  # no variable skipped, none invented
                assert not [d for d in ds.dims if "phony" in str(d)], where
                assert not [k for k in ds.data_vars if "units" not in ds[k].attrs], where
                assert not [k for k in ds.variables if "long_name" not in ds[k].attrs], where
        with xr.open_dataset(path, engine=engine) as root:
            assert root.attrs["Conventions"].startswith("CF-") and root.attrs["format_version"] == 2
            assert "mujoco" in root.attrs["source"] and "h5py" in root.attrs["source"]
            assert "mjharness.rollout.rollout(" in root.attrs["history"] and "steps=" in root.attrs["history"]


def test_cf_units_flags_and_tables(bar_files):
    xr = pytest.importorskip("xarray")
    with xr.open_dataset(bar_files["plain"], engine="h5netcdf") as ds:  # two hinges: one unit each
        assert ds["qpos"].attrs["units"] == "rad" and ds["qvel"].attrs["units"] == "rad/s"
        assert ds["time"].attrs["units"] == "s"
        assert list(ds["status"].attrs["flag_values"]) == [0, 1, 2, 3, 4, 5]
        assert ds["status"].attrs["flag_meanings"].split()[:2] == ["ok", "non_finite_state"]
    with xr.open_dataset(bar_files["outputs"], engine="netcdf4") as ds:  # a free joint mixes m, 1, m/s, rad/s
        assert ds["qpos"].attrs["units"].startswith("mixed") and "state_units" in ds["qpos"].attrs["units"]
        assert list(ds["state_units"].values) == ["m"] * 3 + ["1"] * 4 + ["m/s"] * 3 + ["rad/s"] * 3
    with xr.open_dataset(bar_files["outputs"], engine="netcdf4", group="sensors/table") as t:
        assert dict(zip(t["name"].values, t["units"].values)) == {"top": "m", "acc": "m/s2", "vel": "m/s"}
    with xr.open_dataset(bar_files["outputs"], engine="netcdf4", group="sensors") as s:
        assert s["acc"].attrs["units"] == "m/s2"
    with xr.open_dataset(bar_files["outputs"], engine="netcdf4", group="outputs") as o:
        assert o["_contact_force_pair_geom"].values.tolist() == [[0, 1]]  # was a 2-D attribute netCDF cannot open
        assert o["contact_force"].attrs["pair_geom"] == "outputs/_contact_force_pair_geom"
    with xr.open_dataset(bar_files["loop"], engine="netcdf4", group="episodes") as e:
        assert e["end"].dtype.kind in "OU" and set(e["end"].values) <= {"terminated", "truncated"}


def test_version_1_files_still_read(tmp_path):
    """The committed version 1 fixture (compound /layout, no named axes) reads through every reader path."""
    with open_rollout(ROOT / "data" / "rollout_format_v1.h5") as f:
        assert f.attrs["format_version"] == 1 and list(f.layout.names) == f.table("layout")["name"].astype(str).tolist()
        ds = f.to_xarray()
        assert ds["x"].dims[:2] == ("time", "world") and ds.sizes["time"] == f.samples
        np.testing.assert_array_equal(ds["x"].values, f.x)


# -- an older HDF5 ----------------------------------------------------------------------------------

def test_older_h5py_reads_every_dataset_bit_for_bit(bar_files):
    old = os.environ.get("MJHARNESS_OLD_H5PY_PYTHON")
    if not old or not os.path.isfile(old):
        pytest.skip("no older h5py: set MJHARNESS_OLD_H5PY_PYTHON to a venv's python with h5py 3.10 (.ci/run does)")
    files = _with_shards(bar_files)
    out = subprocess.run([old, str(ROOT / "scripts" / "h5_digests.py"), *files], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout)
    version = subprocess.run([old, "-c", "import h5py; print(h5py.version.hdf5_version)"], capture_output=True,
                             text=True).stdout.strip()
    assert version < "2", f"the older reader has HDF5 {version}"
    for p in files:
        assert theirs[p] == file_digests(p), p


def _h5dump_strings(text: str) -> list[str]:
    body = text.split("DATA {", 1)[1].split("ATTRIBUTE", 1)[0]  # the values, not the attributes after them
    return [json.loads(f'"{s}"') for s in re.findall(r'"((?:[^"\\]|\\.)*)"', body)]


def test_h5dump_1_10_reads_every_dataset(bar_files, tmp_path):
    if shutil.which("h5dump") is None:
        pytest.skip("no h5dump on PATH (Debian: apt-get install hdf5-tools; .ci/run installs it where apt works)")
    path = bar_files["outputs"]
    ls = subprocess.run(["h5ls", "-r", path], capture_output=True, text=True)
    assert ls.returncode == 0 and "*ERROR*" not in ls.stdout, ls.stdout  # how h5ls marks an unreadable dataset
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            ds = f[name]
            if ds.dtype.kind in "fiu" and ds.size:
                out = tmp_path / "d.bin"
                r = subprocess.run(["h5dump", "-b", "LE", "-d", name, "-o", str(out), path], capture_output=True,
                                   text=True)
                assert r.returncode == 0 and "error" not in r.stderr.lower(), (name, r.stderr)
                want = np.ascontiguousarray(ds[()].astype(ds.dtype.newbyteorder("<"))).tobytes()
                assert out.read_bytes() == want, name
            else:
                r = subprocess.run(["h5dump", "-d", name, path], capture_output=True, text=True)
                assert r.returncode == 0 and "error" not in r.stderr.lower(), (name, r.stderr)
                if ds.dtype.kind == "O" and ds.ndim == 1:  # label and table columns: the same strings
                    assert _h5dump_strings(r.stdout) == [v.decode() for v in ds[()]], name


# -- generic readers on our side --------------------------------------------------------------------

def test_to_xarray_on_a_file_being_written_sees_the_flushed_prefix(tmp_path):
    scene = cached_scene("double_pendulum")
    p = str(tmp_path / "live.h5")
    B, T, n = 2, 8, scene.layout.size
    x0 = np.zeros((B, n))
    spec = h5.FileSpec(attrs=dict(format=h5.FORMAT, dt=0.01, record_every=1, steps=T, batch=B, seed=0,
                                  created="2026-12-06T00:00:00+00:00", integrator=json.dumps({"name": "test"})),
                       model=scene.model, compat_log=[], layout=h5.layout_table(scene.layout, scene.joint_of), x0=x0,
                       model_params={}, samples=T, qpos=scene.qpos_segment, qvel=scene.qvel_segment, time_chunk=4)
    h5.create_rollout_file(p, spec)
    w = h5.RolloutWriter(p)
    xs = np.random.default_rng(0).standard_normal((4, B, n))
    w.put(0, 0.01 * np.arange(1, 5), xs, np.zeros(B, np.int8), np.full(B, -1))
    w.check()
    try:
        for _ in range(500):
            with open_rollout(p) as f:
                if f.samples == 4:
                    break
        with open_rollout(p) as f:
            ds = f.to_xarray()
            assert ds.sizes["time"] == 4 and not np.isnan(ds["x"].values).any()  # not the 4 unwritten NaN rows
            np.testing.assert_array_equal(ds["x"].values, xs)
            np.testing.assert_array_equal(ds["qvel"].values, xs[..., scene.qvel_segment])
            assert list(ds["state"].values) == ["shoulder/qpos", "elbow/qpos", "shoulder/qvel", "elbow/qvel"]
            assert ds["x"].attrs["units"] == "mixed: per component in state_units"
            assert list(ds["state_units"].values) == ["rad", "rad", "rad/s", "rad/s"]
    finally:
        w.close(complete=False)


def test_to_xarray_of_every_group_equals_what_xarray_opens(bar_files):
    xr = pytest.importorskip("xarray")
    for kind in ("outputs", "loop", "joined"):
        path = bar_files[kind]
        groups = _groups(path)
        with open_rollout(path) as f:  # closed before xarray opens the file (HDF5 wants one set of open flags)
            ours = {g: f.to_xarray(None if g == "/" else g).load() for g in groups}
        for g, a in ours.items():
            with xr.open_dataset(path, engine="h5netcdf", group=g) as b:
                assert set(a.variables) == set(b.variables) and dict(a.sizes) == dict(b.sizes), (kind, g)
                for k in a.variables:
                    assert a[k].dims == b[k].dims, (kind, g, k)
                    if a[k].dtype.kind in "fiu":
                        assert a[k].values.tobytes() == b[k].values.astype(a[k].dtype).tobytes(), (kind, g, k)
                    else:
                        assert a[k].values.tolist() == b[k].values.tolist(), (kind, g, k)


def test_to_pandas_tables(bar_files):
    with open_rollout(bar_files["outputs"]) as f:
        c = f.to_pandas("contacts")
        slots = f.output("contacts:2")
        assert len(c) == int((slots[..., -2] > 0).sum()) > 0
        assert {"pos_x", "pos_y", "pos_z", "force_normal", "geom1_name"} <= set(c.columns)
        assert set(c["geom1_name"]) | set(c["geom2_name"]) == {"floor", "box"} and isinstance(c["geom1_name"][0], str)
        s = f.to_pandas("sensors")
        assert list(s["name"]) == ["top", "acc", "vel"] and isinstance(s["type"][0], str)
        with pytest.raises(ValueError, match="episodes"):
            f.to_pandas("layout")
    with open_rollout(bar_files["loop"]) as f:
        e = f.to_pandas("episodes")
        assert list(e.columns) == ["world", "episode", "start_step", "end_step", "end"]
        assert all(isinstance(v, str) for v in e["end"]) and sorted(set(e["world"])) == [0, 1]


# -- reproducible from the file ---------------------------------------------------------------------

def test_rerun_reproduces_a_controller_run_bit_for_bit(bar_files, tmp_path, capsys):
    with open_rollout(bar_files["loop"]) as f:
        code = f.code
        assert set(code) == {"controller.init", "controller.step", "terminate"}
        assert "KP * e" in code["controller.step"]["source"] and len(code["controller.step"]["sha256"]) == 64
        assert f.h5["code/modules"][next(iter(f.h5["code/modules"]))][()].decode() == CONTROLLER
    new = str(tmp_path / "again.h5")
    assert cli_main(["rerun", bar_files["loop"], "--out", new, "--no-progress"]) == 0
    assert "identical bit for bit" in capsys.readouterr().out
    with open_rollout(bar_files["loop"]) as a, open_rollout(new) as b:
        assert a.x.tobytes() == b.x.tobytes() and a.carry.tobytes() == b.carry.tobytes()
        assert np.array_equal(a.table("episodes"), b.table("episodes"))
    assert cli_main(["show", bar_files["loop"]]) == 0
    shown = capsys.readouterr().out
    assert f"mjharness rerun {bar_files['loop']} --out NEW.h5" in shown and "controller.step" in shown


def test_rerun_refuses_a_function_whose_source_changed(tmp_path, capsys):
    mod = tmp_path / "drift.py"
    mod.write_text("def ctrl(t, x):\n    return 0.0 * x[:4]\n")
    fn = _module(mod).ctrl
    p = str(tmp_path / "d.h5")
    rollout(cached_scene("arm"), None, steps=2, batch=1, ctrl=fn, out=p, **QUIET)
    mod.write_text("def ctrl(t, x):\n    return 1.0 * x[:4]\n")
    sys.modules.pop("mjharness_user.drift", None)
    assert cli_main(["rerun", p, "--out", str(tmp_path / "e.h5"), "--no-progress"]) == 2
    assert "source changed since the run" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "e.h5")


def test_source_xml_is_the_mjcf_as_given_with_includes_inlined(tmp_path):
    (tmp_path / "body.xml").write_text('<mujoco><body name="b" pos="0 0 1"><joint name="j" type="hinge"/>'
                                       '<geom size="0.1"/></body></mujoco>')
    (tmp_path / "scene.xml").write_text('<mujoco model="inc">\n<worldbody><include file="body.xml"/></worldbody>\n'
                                        '</mujoco>')
    p = str(tmp_path / "inc.h5")
    rollout(str(tmp_path / "scene.xml"), None, steps=2, batch=1, out=p, **QUIET)
    with open_rollout(p) as f:
        assert f.source_xml.startswith('<mujoco model="inc">') and '<body name="b"' in f.source_xml
        assert "include" not in f.source_xml
        import mujoco

        assert mujoco.MjModel.from_xml_string(f.source_xml).njnt == 1


def test_array_controls_are_kept_for_a_rerun(tmp_path):
    p = str(tmp_path / "a.h5")
    m = cached_scene("arm").model
    u = np.random.default_rng(1).standard_normal((2, 4, m.nu)) * 0.1
    rollout(cached_scene("arm"), None, steps=4, batch=2, ctrl=u, out=p, **QUIET)
    with open_rollout(p) as f:
        np.testing.assert_array_equal(f.read("inputs/ctrl"), u)
        assert f.h5["inputs/ctrl"].dims[2][0][()].astype(str).tolist() == [
            m.actuator(i).name for i in range(m.nu)]
    from mjharness.rollout.cli.rerun import rerun_call

    _, _, kw = rerun_call(p)
    np.testing.assert_array_equal(kw["ctrl"], u)


def test_units_follow_the_joint_and_actuator_kind():
    from mjharness.rollout.h5 import cf

    m = cached_scene("arm").model  # hinges yaw, shoulder, elbow and a slide, one motor each
    unit = lambda typ, obj: cf.sensor_units(m, {"type": typ, "object": obj})  # noqa: E731
    assert (unit("jointpos", "joint:slide"), unit("jointpos", "joint:elbow")) == ("m", "rad")
    assert (unit("jointvel", "joint:slide"), unit("jointactfrc", "joint:elbow")) == ("m/s", "N m")
    assert (unit("actuatorfrc", "actuator:slide"), unit("actuatorpos", "actuator:yaw")) == ("N", "rad")
    assert cf.joint_units(m) == (["rad"] * 3 + ["m"], ["rad/s"] * 3 + ["m/s"])


def test_rerun_refuses_a_lambda_and_show_says_so(tmp_path, capsys):
    p = str(tmp_path / "lam.h5")
    rollout(cached_scene("arm"), None, steps=2, batch=1, ctrl=lambda t, x: 0.0 * x[:4], out=p, **QUIET)
    with open_rollout(p) as f:
        assert not f.code["ctrl"]["importable"]
        assert "lambda t, x: 0.0 * x[:4]" in f.code["ctrl"]["source"]  # the text is kept all the same
    assert cli_main(["show", p]) == 0
    assert "NOT importable" in capsys.readouterr().out
    assert cli_main(["rerun", p, "--out", str(tmp_path / "again.h5"), "--no-progress"]) == 2
    assert "not importable by name" in capsys.readouterr().err


def test_a_changed_layout_string_is_caught_on_reading(bar_files, tmp_path):
    """The layout's text columns live outside any checksummed chunk: the layout_sha256 attribute (itself in the
    content digest) catches a change when the layout is read."""
    p = tmp_path / "edited.h5"
    shutil.copy(bar_files["plain"], p)
    with h5py.File(p, "r+") as f:
        names = f["layout_table/update"][()]
        names[0] = b"quaternion"
        f["layout_table/update"][...] = names
    with open_rollout(p) as f:
        with pytest.raises(h5.CorruptFileError, match="layout_table"):
            f.layout  # noqa: B018
