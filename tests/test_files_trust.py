"""Files you can trust (issue 28): a full disk, a second writer, live readers, corruption, check defaults,
the memory estimate, SIGTERM, old files; plus named axes for generic readers (issue 29.9).

Fault tests run the CLI as a subprocess (``--backend mujoco``: compiles in well under a second) on
double_pendulum. Nothing here waits for "long enough": a subprocess is stopped (SIGSTOP) at a state the
test observed, and loops are bounded by counts or by a process's exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

from mjharness.rollout import h5, open_rollout
from mjharness.rollout.cli.app import main
from mjharness.rollout.errors import RolloutError

RUN = ["double_pendulum", "--backend", "mujoco", "--no-progress"]
SMALL = ["--steps", "1000", "--record-every", "1", "--batch", "100", "--chunk", "100"]  # ~4.6 MiB
LONG = ["--steps", "40000", "--batch", "4", "--record-every", "100", "--chunk", "200"]


def cli(*args, timeout=300):
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "mjharness.rollout.cli", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.perf_counter() - t


def start(*args):
    return subprocess.Popen([sys.executable, "-m", "mjharness.rollout.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_lock(proc, path, limit_s=300):
    """Until the run holds its writer lock (it has compiled and opened the file) or exits."""
    t_end = time.monotonic() + limit_s
    while not os.path.exists(h5.lock.lock_path(path)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < t_end, "the run never took its lock"
        time.sleep(0.02)


def wait_for_samples(proc, path, k, limit_s=300):
    """Until the file being written holds at least k samples (read as a live reader would)."""
    t_end = time.monotonic() + limit_s
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < t_end, f"{path} never reached {k} samples"
        try:
            with open_rollout(path) as f:
                if f.samples >= k:
                    return
        except h5.RolloutFileError:  # not created yet, or being prepared: FileNotReadyError
            pass
        time.sleep(0.02)


def _reference(tmp_path_factory, name: str, size) -> str:
    """An uninterrupted CLI run of the module's configuration, as the reference a test compares with."""
    p = str(tmp_path_factory.mktemp("ref") / name)
    rc, _, err, _ = cli("run", *RUN, *size, "--out", p)
    assert rc == 0, err
    return p


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    return _reference(tmp_path_factory, "long.h5", LONG)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return _reference(tmp_path_factory, "u.h5", SMALL)


# -- 1. write errors are errors ---------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a 2 MB tmpfs here ({r.stderr.strip() or r.returncode}); the injected-error test "
                    f"covers the logic")
    yield d
    subprocess.run(["umount", str(d)], capture_output=True)


def test_full_disk_stops_cleanly_and_resumes_bit_identical(tiny_disk, tmp_path, uninterrupted):
    out = str(tiny_disk / "f.h5")
    rc, stdout, err, wall = cli("run", *RUN, *SMALL, "--out", out)
    assert rc == 2 and wall < 30, (rc, wall, err)
    assert "No space left" in err and "writing /" in err and "--resume" in err
    assert "complete" not in stdout and "worlds:" not in stdout, stdout  # no success summary
    with open_rollout(out) as f:
        assert not f.complete and 0 < f.samples < 1000 and f.samples % 100 == 0
        assert not np.isnan(f.x).any()
    moved = str(tmp_path / "moved.h5")
    shutil.copy(out, moved)
    rc, _, err, _ = cli("run", "--resume", moved, "--no-progress")
    assert rc == 0, err
    with open_rollout(moved) as a, open_rollout(uninterrupted) as b:
        assert a.complete and a.samples == 1000
        assert np.array_equal(a.h5["x"][()], b.h5["x"][()]) and np.array_equal(a.carry, b.carry)


def test_injected_write_error_stops_the_api_run(tmp_path, monkeypatch):
    """Any OSError in the writer thread (here EIO on the second chunk) stops rollout() with RolloutWriteError;
    the file keeps the first chunk, complete=False, and a resume completes it bit for bit."""
    import errno

    from mjharness.rollout import rollout

    kw = dict(steps=400, batch=3, chunk=100, record_every=1, progress=False, backend="mujoco")
    ref = rollout("double_pendulum", **kw)
    p = str(tmp_path / "eio.h5")
    real = h5.writer.RolloutWriter._write
    calls = []

    def failing(self, item):
        calls.append(item[0])
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real(self, item)

    monkeypatch.setattr(h5.writer.RolloutWriter, "_write", failing)
    with pytest.raises(h5.RolloutWriteError, match=r"Input/output error \(injected\)") as e:
        rollout("double_pendulum", out=p, **kw)
    assert e.value.path == p and e.value.dataset and isinstance(e.value.os_error, OSError)
    from mjharness.rollout.errors import RolloutFaultError

    assert isinstance(e.value, RolloutFaultError)
    with open_rollout(p) as f:
        assert f.samples == 100 and not f.complete
    monkeypatch.setattr(h5.writer.RolloutWriter, "_write", real)
    r = rollout("double_pendulum", resume=p, **{k: v for k, v in kw.items() if k != "batch"})
    assert np.array_equal(r.x, ref.x)


def test_free_space_check_warns_or_refuses(tmp_path):
    from mjharness.rollout.engine import memory

    assert memory.check_space(str(tmp_path / "f.h5"), 1, require=False) is None
    huge = 1 << 60
    assert "free" in memory.check_space(str(tmp_path / "f.h5"), huge, require=False)
    with pytest.raises(RolloutError, match="require-space"):
        memory.check_space(str(tmp_path / "f.h5"), huge, require=True)


# -- 2. one writer per file -------------------------------------------------------------------------

def _complete(path) -> bool:
    try:
        with open_rollout(path) as f:
            return f.complete
    except h5.FileNotReadyError:  # stopped while creating it
        return False


def stopped_mid_run(tmp_path, stem, ready, attempts=5):
    """(process, path): a ``run`` of ``LONG`` stopped (SIGSTOP) once ``ready(process, path)`` returns, while it holds
    its writer lock and its file is incomplete. The run lasts about a second on MuJoCo C, so on a loaded machine
    it can finish between the wait and the signal: then it runs again on a new file (no check is relaxed)."""
    for i in range(attempts):
        out = str(tmp_path / f"{stem}{i}.h5")
        proc = start("run", *RUN, *LONG, "--out", out)
        ready(proc, out)
        proc.send_signal(signal.SIGSTOP)
        if proc.poll() is None and os.path.exists(h5.lock.lock_path(out)) and not _complete(out):
            return proc, out
        proc.send_signal(signal.SIGCONT)
        proc.communicate(timeout=600)
    raise AssertionError(f"the run finished before it could be stopped mid-run, {attempts} times")


def test_second_writer_refused_naming_the_holder_first_run_intact(tmp_path):
    first, out = stopped_mid_run(tmp_path, "same", wait_for_lock)  # held mid-run, whatever the machine's load
    try:
        try:
            rc, _, err, _ = cli("run", *RUN, *LONG, "--out", out, "--overwrite")
        finally:
            first.send_signal(signal.SIGCONT)
        assert rc == 2 and f"pid {first.pid}" in err and "host" in err and "started" in err, err
        _, err1 = first.communicate(timeout=600)
        assert first.returncode == 0, err1
    finally:
        if first.poll() is None:
            first.kill()
    rc, out_v, _, _ = cli("verify", out)
    assert rc == 0, out_v
    with open_rollout(out) as f:
        assert f.complete and f.samples == 400


def test_a_file_its_writer_is_creating_is_not_ready_not_foreign(tmp_path):
    """Between a writer taking its lock and HDF5 writing the superblock the file has no signature yet: a reader is
    told to retry (FileNotReadyError naming the writer), not that it is not a rollout file; without a live writer
    the same bytes are not a rollout file."""
    p = str(tmp_path / "new.h5")
    open(p, "wb").close()
    with h5.FileLock(p):
        with pytest.raises(h5.FileNotReadyError, match=f"creating this file.*pid {os.getpid()}"):
            open_rollout(p)
    with pytest.raises(h5.RolloutFileError, match="no HDF5 signature") as e:
        open_rollout(p)
    assert not isinstance(e.value, h5.FileNotReadyError)


def test_lock_in_process_and_stale_lock(tmp_path):
    p = str(tmp_path / "f.h5")
    with h5.FileLock(p):
        with pytest.raises(h5.FileInUseError, match=f"pid {os.getpid()}") as e:
            h5.FileLock(p).acquire()
        assert e.value.holder["pid"] == os.getpid()
        with pytest.raises(h5.FileInUseError):
            h5.check_not_in_use(p)
    assert not os.path.exists(h5.lock.lock_path(p))
    # A killed run's sidecar: its body names a dead pid, and nobody holds its flock: not in use.
    with open(h5.lock.lock_path(p), "w") as fh:
        fh.write('{"host": "gone", "pid": 999999999, "started": "2020-01-01T00:00:00+00:00"}')
    h5.check_not_in_use(p)
    with h5.FileLock(p) as lk:
        assert lk.held


def test_killed_run_resumes_despite_its_lock_and_swmr_marks(tmp_path, long_run):
    """SIGKILL mid-run leaves the sidecar and a superblock marked "open for write": --resume still works and
    ends bit-identical to an uninterrupted run."""
    proc, out = stopped_mid_run(tmp_path, "k", lambda p, o: wait_for_samples(p, o, 2))
    proc.kill()
    proc.wait()
    assert os.path.exists(h5.lock.lock_path(out))
    with open_rollout(out) as f:  # readable as it was left
        assert not f.complete and not np.isnan(f.x).any()
    assert main(["verify", out]) == 0  # the published prefix is intact, hashes and all
    copy = str(tmp_path / "copy.h5")
    shutil.copy(out, copy)
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(copy, "r")  # a plain reader refuses what the killed writer left ...
    assert main(["verify", "--repair", copy]) == 0
    with h5py.File(copy, "r") as f:  # ... until verify --repair clears it (h5clear -s)
        assert f["x"].shape[0] > 0
    rc, _, err, _ = cli("run", "--resume", out, "--no-progress")
    assert rc == 0, err
    with open_rollout(out) as a, open_rollout(long_run) as b:
        assert a.complete and np.array_equal(a.h5["x"][()], b.h5["x"][()])


# -- 3. live readers --------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import os, sys, numpy as np
    from mjharness.integrators import StateRegistry, StateSpec
    from mjharness.rollout import h5
    path, stop = sys.argv[1], sys.argv[2]
    reg = StateRegistry(); reg.register("q", StateSpec((3,))); reg.register("v", StateSpec((3,)))
    layout = reg.finalize()
    T, B, S = 20000, 8, 10
    spec = h5.FileSpec(attrs=dict(format=h5.FORMAT, format_version=h5.FORMAT_VERSION, dt=0.01, record_every=1,
                                  steps=T, batch=B, seed=0, integrator='{"name": "test"}'),
                       compat_log=[], layout=h5.layout_table(layout), x0=np.zeros((B, 6)), model_params={},
                       samples=T, qpos=None, qvel=None, time_chunk=S)
    h5.create_rollout_file(path, spec)
    w = h5.RolloutWriter(path)
    for j0 in range(0, T, S):
        if os.path.exists(stop):
            break
        x = np.broadcast_to(np.arange(j0, j0 + S, dtype=float)[:, None, None], (S, B, 6))
        w.put(j0, 0.01 * np.arange(j0 + 1, j0 + S + 1), x, np.zeros(B, np.int8), np.full(B, -1))
        if j0 == 0:
            w.check(); open(path + ".started", "w").close()
    w.close(complete=True)
""")


def test_200_live_reads_see_a_consistent_prefix(tmp_path):
    p, stop = str(tmp_path / "live.h5"), str(tmp_path / "stop")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, p, stop], stderr=subprocess.PIPE, text=True)
    try:
        t_end = time.monotonic() + 300
        while not os.path.exists(p + ".started"):
            assert writer.poll() is None, writer.communicate()
            assert time.monotonic() < t_end
            time.sleep(0.01)
        outcomes = {"ok": 0, "nan_rows": 0, "raw_oserror": 0, "retry": 0, "grew": 0}
        last = -1
        for i in range(200):
            try:
                if i % 2:
                    with open_rollout(p) as f:
                        n, x = f.samples, f.x
                else:  # plain h5py, as docs/files.md documents it
                    with h5py.File(p, "r", libver="latest", swmr=True, locking=False) as f:
                        prog = f["progress"]
                        prog.refresh()
                        n = int(prog[0])
                        ds = f["x"]
                        ds.refresh()
                        x = ds[:n]
            except h5.FileNotReadyError:
                outcomes["retry"] += 1
                continue
            except OSError:
                outcomes["raw_oserror"] += 1
                continue
            # (open_rollout reads /progress again for .x: the prefix may have grown since .samples)
            bad = np.isnan(x).any(axis=(1, 2)).sum() + (len(x) < n)
            wrong = (x[:, 0, 0] != np.arange(len(x))).sum()  # row j holds j: no row from another sample
            outcomes["nan_rows"] += int(bad + wrong)
            outcomes["ok"] += 1
            outcomes["grew"] += n > last
            last = max(last, n)
        open(stop, "w").close()
        writer.communicate(timeout=300)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert outcomes["nan_rows"] == 0 and outcomes["raw_oserror"] == 0, outcomes
    assert outcomes["ok"] + outcomes["retry"] == 200 and outcomes["ok"] >= 190, outcomes
    assert writer.returncode == 0


# -- 4. corruption is detected ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("good") / "g.h5")
    rc, _, err, _ = cli("run", *RUN, "--steps", "500", "--batch", "3", "--record-every", "10", "--out", p)
    assert rc == 0, err
    return p


def _xor_chunk(path, dataset="x", index=0, nbytes=16):
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
    with open(path, "r+b") as fh:
        at = info.byte_offset + info.size // 2
        fh.seek(at)
        b = bytearray(fh.read(nbytes))
        fh.seek(at)
        fh.write(bytes(v ^ 0xA5 for v in b))


def test_intact_file_verifies_and_passes_check_without_tol(good_file, tmp_path):
    assert main(["verify", good_file]) == 0
    out = str(tmp_path / "rep")
    assert main(["check", good_file, "--reference", "mujoco", "--no-plot", "--out", out]) == 0
    import json

    rep = json.load(open(out + ".json"))
    assert "Euler" in rep["reference"] and "semi_implicit_euler" in rep["reference"]
    assert all(f["tol"] is not None for f in rep["fields"].values())
    assert any("default tolerances" in n for n in rep["notes"])


def test_xored_chunk_is_found_by_verify_reader_and_check(good_file, tmp_path, capsys):
    p = str(tmp_path / "bad.h5")
    shutil.copy(good_file, p)
    _xor_chunk(p, "x")
    assert main(["verify", p]) == 1
    assert "/x chunk (0, 0, 0)" in capsys.readouterr().out
    with open_rollout(p) as f, pytest.raises(h5.CorruptFileError, match="/x chunk") as e:
        _ = f.x
    assert e.value.dataset == "/x" and e.value.chunk == (0, 0, 0)
    assert main(["check", p, "--reference", "mujoco", "--no-plot", "--out", str(tmp_path / "r")]) == 1


def test_check_without_tol_fails_a_file_off_by_more_than_0_1(good_file, tmp_path):
    p = str(tmp_path / "off.h5")
    shutil.copy(good_file, p)
    with h5py.File(p, "r+", libver="latest") as f:  # rewritten through HDF5: checksums stay valid
        f["x"][10, 1, 0] += 0.2
    assert main(["verify", p]) == 1  # but not the content hash of its block (issue 39)
    assert main(["check", p, "--reference", "mujoco", "--no-plot", "--out", str(tmp_path / "r")]) == 1


def test_model_or_settings_change_breaks_the_digest(good_file, tmp_path, capsys):
    p = str(tmp_path / "d.h5")
    shutil.copy(good_file, p)
    with h5py.File(p, "r+", libver="latest") as f:
        f.attrs["dt"] = 0.5
    assert main(["verify", p]) == 1
    assert "content digest mismatch" in capsys.readouterr().out


def test_verify_exit_codes_for_foreign_and_old_files(tmp_path, capsys):
    q = tmp_path / "text.h5"
    q.write_text("hello")
    assert main(["verify", str(q)]) == 2
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.zeros(3)
    assert main(["verify", str(other)]) == 2
    v1 = os.path.join(os.path.dirname(__file__), "..", "data", "rollout_format_v1.h5")
    capsys.readouterr()
    assert main(["verify", v1]) == 0
    assert "no checksums (written before format integrity 1" in capsys.readouterr().out


def test_format_v1_fixture_resumes(tmp_path):
    p = str(tmp_path / "v1.h5")
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "data", "rollout_format_v1.h5"), p)
    rc, _, err, _ = cli("run", "--resume", p, "--no-progress")
    assert rc == 0, err
    with open_rollout(p) as f:
        assert f.complete and f.samples == f.h5["x"].shape[0] and not np.isnan(f.x).any()


def test_damaged_header_is_a_named_error(tmp_path):
    p = str(tmp_path / "h.h5")
    with h5py.File(p, "w", libver="latest") as f:
        f.attrs["format"] = "mjharness-rollout"
        f["x"] = np.zeros(3)
    with open(p, "r+b") as fh:
        fh.seek(40)
        fh.write(b"\xff" * 24)
    with pytest.raises(h5.RolloutFileError):
        open_rollout(p)


# -- 6. smaller defects -----------------------------------------------------------------------------

def test_memory_estimate_refuses_ten_million_worlds_fast():
    from mjharness.rollout import rollout

    t = time.perf_counter()
    with pytest.raises(RolloutError, match=r"GiB.*chunk.*keep=False.*fewer worlds") as e:
        rollout("double_pendulum", steps=1000, batch=10**7, progress=False, backend="mujoco")
    assert time.perf_counter() - t < 30
    assert "trajectory" in str(e.value) and "available" in str(e.value)


def test_memory_estimate_is_a_pure_function_of_sizes():
    from mjharness.rollout.engine.memory import estimate

    a = estimate(n=4, nc=2, batch=10, samples=100, chunk_samples=10, output_width=0, keep=True)
    b = estimate(n=4, nc=2, batch=10, samples=100, chunk_samples=10, output_width=0, keep=False)
    assert a.parts["trajectory"] == 10 * 100 * 4 * 8 and b.parts["trajectory"] == 0
    assert a.host - b.host == a.parts["trajectory"] and a.device == b.device


def test_resume_to_fewer_steps_is_refused(good_file, tmp_path):
    p = str(tmp_path / "short.h5")
    shutil.copy(good_file, p)
    rc, _, err, _ = cli("run", "--resume", p, "--steps", "250", "--no-progress")
    assert rc == 2 and "steps >= 500" in err, err


def test_sigterm_says_where_the_file_stands(tmp_path, long_run):
    proc, out = stopped_mid_run(tmp_path, "t", lambda p, o: wait_for_samples(p, o, 2))
    try:
        proc.send_signal(signal.SIGTERM)  # delivered when it continues, mid-run
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "complete=False" in err and f"--resume {out}" in err, err
    with open_rollout(out) as f:
        assert not f.complete and f.samples >= 2
    rc, _, err, _ = cli("run", "--resume", out, "--no-progress")
    assert rc == 0, err
    with open_rollout(out) as a, open_rollout(long_run) as b:
        assert a.complete and np.array_equal(a.h5["x"][()], b.h5["x"][()])


# -- issue 29.9: generic readers ----------------------------------------------------------------------

SENSOR_XML = """<mujoco model="s"><worldbody><body name="link" pos="0 0 1"><joint name="hinge" axis="0 1 0"/>
<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/><site name="tip" pos="0.3 0 0"/></body></worldbody>
<sensor><jointpos name="angle" joint="hinge"/><accelerometer name="acc" site="tip"/></sensor></mujoco>"""


def test_xarray_sees_named_axes_and_time_coordinates(tmp_path):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    xml = tmp_path / "s.xml"
    xml.write_text(SENSOR_XML)
    p = str(tmp_path / "s.h5")
    rc, _, err, _ = cli("run", str(xml), "--backend", "mujoco", "--no-progress", "--steps", "200", "--batch", "3",
                        "--outputs", "sensordata", "xpos", "--out", p)
    assert rc == 0, err
    root = xr.open_dataset(p, engine="h5netcdf")
    assert root["x"].dims == ("time", "world", "state") and not any("phony" in d for d in root.dims)
    assert root.attrs["history"].endswith(f"mjharness run {xml} --backend mujoco --no-progress --steps 200 --batch 3 "
                                          f"--outputs sensordata xpos --out {p}")  # CF: the command line
    assert list(root["state"].values) == ["hinge/qpos", "hinge/qvel"]
    assert root["qpos"].dims[2] == "qpos_index" and root["qvel"].dims[2] == "qvel_index"
    assert root["carry"].dims[2] == "carry_index" != root["qvel"].dims[2]
    outs = xr.open_dataset(p, engine="h5netcdf", group="outputs")
    assert "time" in outs.coords and np.allclose(outs["time"].values, root["time"].values)
    assert outs["sensordata"].dims[:2] == ("time", "world")
    sens = xr.open_dataset(p, engine="h5netcdf", group="sensors")
    assert sens["acc"].dims == ("time", "world", "_acc_component") and "time" in sens.coords
    assert list(sens["_acc_component"].values) == ["acc[0]", "acc[1]", "acc[2]"]
    assert not any("phony" in d for d in sens.dims)
    for ds in (root, outs, sens):
        ds.close()
    with open_rollout(p) as f:
        assert f.output_names == ("sensordata", "xpos")  # the group's axes are not outputs


@pytest.mark.parametrize("kw", [dict(t0=float("nan")), dict(dt=float("inf")), dict(t0=float("-inf"))])
def test_non_finite_t0_dt_refused(kw):
    from mjharness.rollout import rollout

    with pytest.raises(RolloutError, match="finite"):
        rollout("double_pendulum", steps=10, batch=1, progress=False, backend="mujoco", **kw)


def test_show_says_whether_the_file_has_checksums(good_file, capsys):
    assert main(["show", good_file]) == 0
    assert "chunk checksums and content digest" in capsys.readouterr().out
    v1 = os.path.join(os.path.dirname(__file__), "..", "data", "rollout_format_v1.h5")
    assert main(["show", v1]) == 0
    assert "no checksums" in capsys.readouterr().out
