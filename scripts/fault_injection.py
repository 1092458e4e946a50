"""Random byte flips over rollout files: does ``mjharness verify`` see every change a reader would see?

    python scripts/fault_injection.py [--flips 400] [--seed 0] [--workdir DIR] [--json out.json]

Makes the files of issue 39's bar with the CLI (MuJoCo C backend): a plain run, one with outputs
(sensors, contact_force, contacts, energy), a controller + termination + reset run, a randomized run and
a ``--local-processes 2`` joined file (with its two shards). Then, for each flip (spread over the files in
turn, uniformly over the bytes of the file and, for the joined file, of its shards), one random byte of a
fresh copy is XORed with a random non-zero value and two things are computed, each in a forked child
(so a crash or a hang of the HDF5 library is a finding, not the end of the campaign):

- the oracle: what a reader gets from the file (and its shards): every object, attribute (dimension
  scales included) and every dataset's values as h5py returns them, hashed; "changed" when it differs
  from the intact file's, or when anything fails to read;
- ``mjharness verify`` (the CLI's ``main``, so its error handling is included): exit status and output.

Checked per flip: changed => exit 1; exit 0 => unchanged; never exit 2 (all are rollout files); never
"looks like a bug"; no crash, no hang. Then the joined file's shard cases: a missing shard, a corrupt shard
and a replaced shard (another run's) each exit 1 naming the shard. Prints the counts; exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

ROBOT = """<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="arm" pos="0 0 0.3">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom name="link" type="capsule" fromto="0 0 0 0.4 0 0.05" size="0.03" mass="0.5"/>
      <site name="imu" pos="0.4 0 0.05"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" name="m"/></actuator>
  <sensor>
    <accelerometer name="imu_acc" site="imu"/>
    <jointpos name="hinge_q" joint="hinge"/>
    <jointvel name="hinge_v" joint="hinge"/>
  </sensor>
</mujoco>"""

RUN = ["--backend", "mujoco", "--no-progress"]


def runs(d: str) -> dict:
    """name -> (CLI arguments after ``run``, the file's path)."""
    robot = os.path.join(d, "robot.xml")
    with open(robot, "w") as fh:
        fh.write(ROBOT)
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "arm_reach.py")
    small = ["--steps", "300", "--batch", "3", "--record-every", "10"]
    return {
        "plain": (["double_pendulum", *small], os.path.join(d, "plain.h5")),
        "outputs": ([robot, *small, "--outputs", "sensordata", "contact_force", "contacts", "energy"],
                    os.path.join(d, "outputs.h5")),
        "closed_loop": (["arm", "--controller", f"{ex}:make", "--terminate", f"{ex}:reached", "--on-terminate",
                         "reset", "--reset-to", "draw", *small], os.path.join(d, "closed_loop.h5")),
        "randomized": (["double_pendulum", *small, "--randomize", "body_mass:link1=*uniform(0.5, 2)",
                        "dof_damping:elbow=uniform(0.01, 0.5)"], os.path.join(d, "randomized.h5")),
        "joined": (["box_on_plane", "--batch", "4", "--steps", "200", "--record-every", "10", "--outputs", "xpos",
                    "--local-processes", "2"], os.path.join(d, "joined.h5")),
    }


def make_files(d: str) -> dict:
    out = {}
    for name, (args, path) in runs(d).items():
        p = subprocess.run([sys.executable, "-m", "mjharness.rollout.cli", "run", *args, *RUN, "--out", path],
                           capture_output=True, text=True, cwd=d, timeout=900)
        if p.returncode != 0:
            raise SystemExit(f"making {name} failed:\n{p.stderr[-3000:]}")
        out[name] = path
    return out


def file_set(path: str) -> list[str]:
    """The file and, for a joined file, its shards (beside it)."""
    with h5py.File(path, "r", locking=False) as f:
        shards = f.attrs.get("shards")
    names = [] if shards is None else [s.decode() if isinstance(s, bytes) else str(s) for s in np.atleast_1d(shards)]
    return [path] + [os.path.join(os.path.dirname(path), s) for s in names]


# -- the oracle: what a reader gets ---------------------------------------------------------------------

def reader_view(path: str) -> str:
    """A hash of everything h5py returns from ``path`` (and its shards): objects, attributes, values."""
    from mjharness.rollout.h5 import digest as dg

    h = dg.hasher()
    for p in file_set(path):
        with h5py.File(p, "r", locking=False) as f:
            seen = []
            f.visit_links(seen.append)
            for name in ["/"] + sorted(seen):
                obj = f[name]
                h.update(name.encode())
                for k in sorted(obj.attrs.keys()):
                    h.update(k.encode())
                    dg.feed(h, obj.attrs[k], f)
                if isinstance(obj, h5py.Dataset):
                    dg.feed(h, repr((obj.dtype, obj.shape, obj.maxshape, obj.chunks)))
                    dg.feed(h, obj.fillvalue, f)
                    dg.feed(h, obj[()], f)
    return h.hexdigest()


def verify_cli(path: str) -> tuple[int, str]:
    from mjharness.rollout.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["verify", path])
    return rc, out.getvalue() + err.getvalue()


def in_child(fn, *args, timeout=120):
    """``fn(*args)`` in a forked child: ("ok", value) | ("error", text) | ("crash", signal) | ("hang", None)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        try:
            res = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            res = ("error", f"{type(e).__name__}: {e}")
        with os.fdopen(w, "w") as fh:
            json.dump(res, fh)
        os._exit(0)
    os.close(w)
    t_end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > t_end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return ("hang", None)
        time.sleep(0.005)
    with os.fdopen(r) as fh:
        text = fh.read()
    if os.WIFSIGNALED(status) or not text:
        return ("crash", os.WTERMSIG(status) if os.WIFSIGNALED(status) else status)
    return tuple(json.loads(text))


# -- one flip --------------------------------------------------------------------------------------------

def copy_set(path: str, d: str) -> str:
    for p in file_set(path):
        shutil.copy(p, os.path.join(d, os.path.basename(p)))
    return os.path.join(d, os.path.basename(path))


def flip_one(path: str, rng: random.Random, d: str) -> dict:
    """Copy ``path`` (and shards) into ``d``, flip one byte, and judge."""
    target = copy_set(path, d)
    files = file_set(target)
    sizes = [os.path.getsize(p) for p in files]
    at = rng.randrange(sum(sizes))
    k = 0
    while at >= sizes[k]:
        at -= sizes[k]
        k += 1
    x = rng.randrange(1, 256)
    with open(files[k], "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ x]))
    return dict(file=os.path.basename(files[k]), offset=at, xor=x, target=target)


def judge(baseline: str, target: str) -> dict:
    view = in_child(reader_view, target)
    changed = view[0] != "ok" or view[1] != baseline
    ver = in_child(verify_cli, target)
    rc, text = (ver[1][0], ver[1][1]) if ver[0] == "ok" else (None, f"{ver[0]}: {ver[1]}")
    fails = []
    if ver[0] != "ok":
        fails.append(f"verify {ver[0]} ({ver[1]})")
    if changed and rc != 1:
        fails.append(f"content changed ({view[0]}) but verify exit {rc}")
    if rc == 0 and changed:
        fails.append("exit 0 on a changed file")
    if rc == 2:
        fails.append("exit 2 on a rollout file")
    if "looks like a bug" in text:
        fails.append("'looks like a bug'")
    return dict(changed=changed, oracle=view[0], rc=rc, fails=fails, text=text[-600:])


def shard_cases(joined: str, other: str, d: str) -> list[dict]:
    """A missing, a corrupt and a replaced shard of ``joined`` (``other``: another run's joined file)."""
    out = []
    shard = os.path.basename(file_set(joined)[2])
    for case in ("missing", "corrupt", "replaced"):
        sub = tempfile.mkdtemp(dir=d)
        t = copy_set(joined, sub)
        sp = os.path.join(sub, shard)
        if case == "missing":
            os.remove(sp)
        elif case == "corrupt":
            with h5py.File(sp, "r", locking=False) as f:
                info = f["x"].id.get_chunk_info(0)
            with open(sp, "r+b") as fh:
                fh.seek(info.byte_offset + info.size // 2)
                fh.write(b"\xa5\x5a\xa5\x5a")
        else:
            shutil.copy(os.path.join(os.path.dirname(other), os.path.basename(file_set(other)[2])), sp)
        ver = in_child(verify_cli, t)
        rc, text = (ver[1][0], ver[1][1]) if ver[0] == "ok" else (None, str(ver))
        ok = rc == 1 and f"shard {shard}" in text
        out.append(dict(case=case, rc=rc, ok=ok, text=text[-600:]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flips", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    d = a.workdir or tempfile.mkdtemp(prefix="mjh-flips-")
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    files = make_files(d)
    other_dir = os.path.join(d, "other")
    os.makedirs(other_dir, exist_ok=True)
    args, _ = runs(d)["joined"]
    subprocess.run([sys.executable, "-m", "mjharness.rollout.cli", "run", *args, *RUN, "--seed", "7", "--out",
                    os.path.join(other_dir, "joined.h5")], check=True, capture_output=True, cwd=other_dir)
    print(f"files made in {time.perf_counter() - t0:.0f} s: " +
          ", ".join(f"{k} {sum(os.path.getsize(p) for p in file_set(v)) // 1024} KiB" for k, v in files.items()),
          flush=True)
    base = {k: reader_view(v) for k, v in files.items()}
    for k, v in files.items():
        rc, text = verify_cli(v)
        assert rc == 0, f"the intact {k} file does not verify:\n{text}"
    rng = random.Random(a.seed)
    names = list(files)
    results, t0 = [], time.perf_counter()
    for i in range(a.flips):
        name = names[i % len(names)]
        sub = tempfile.mkdtemp(dir=d)
        info = flip_one(files[name], rng, sub)
        res = judge(base[name], info["target"])
        results.append(dict(kind=name, **{k: v for k, v in info.items() if k != "target"}, **res))
        shutil.rmtree(sub)
        if res["fails"]:
            print(f"FAIL flip {i} {name} {info['file']}@{info['offset']} ^{info['xor']:#04x}: {res['fails']}\n"
                  f"{res['text']}", flush=True)
        if (i + 1) % 50 == 0:
            print(f"{i + 1} flips ({time.perf_counter() - t0:.0f} s)", flush=True)
    shards = shard_cases(files["joined"], os.path.join(other_dir, "joined.h5"), d)
    changed = sum(r["changed"] for r in results)
    rcs = {str(c): sum(r["rc"] == c for r in results) for c in (0, 1, 2, None)}
    fails = [r for r in results if r["fails"]]
    summary = dict(flips=len(results), changed=changed, unchanged=len(results) - changed, exit_codes=rcs,
                   changed_and_exit1=sum(r["changed"] and r["rc"] == 1 for r in results),
                   unchanged_and_exit0=sum(not r["changed"] and r["rc"] == 0 for r in results),
                   unchanged_and_exit1=sum(not r["changed"] and r["rc"] == 1 for r in results),
                   unreadable=sum(r["oracle"] != "ok" for r in results), failures=len(fails),
                   per_kind={k: sum(r["kind"] == k for r in results) for k in names},
                   shard_cases={s["case"]: s["ok"] for s in shards}, load_after=round(os.getloadavg()[0], 2))
    print(json.dumps(summary, indent=1))
    for s in shards:
        if not s["ok"]:
            print(f"FAIL shard case {s['case']}: exit {s['rc']}\n{s['text']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(summary=summary, flips=results, shards=shards), fh, indent=1)
    return 1 if fails or not all(s["ok"] for s in shards) else 0


if __name__ == "__main__":
    sys.exit(main())
