"""Contacts out of a batched run (issue 34): every contact with its full force, equal to MuJoCo C's
``d.contact``/``mj_contactForce`` on the C backend and to MJX's own forces on MJX; a world with more contacts
than the K slots is flagged (file, run summary), the others are unaffected; probe and buffer sizes."""

import h5py
import jax
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjharness.adapters import MjScene
from mjharness.adapters.contacts import COL, FORCE, FRAME, POS, contact_table, model_contact_bound, warp_buffers
from mjharness.adapters.outputs import OutputError, _contact_pairs, parse_outputs
from mjharness.rollout import rollout
from mjharness.rollout.engine.plan import initial_states

# Two boxes and two capsules sliding on a plane; they collide with the floor only (contype 2, conaffinity 1),
# which keeps MJX's compile to two collision functions.
XML = """
<mujoco>
  <option timestep="0.002"/>
  <default><geom contype="2" conaffinity="1" friction="0.6 0.005 0.0001"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" contype="1" conaffinity="1"/>
    <body name="box_a" pos="0 0 0.1"><freejoint/><geom name="box_a" type="box" size="0.1 0.08 0.1" mass="1"/></body>
    <body name="box_b" pos="0 1 0.1"><freejoint/><geom name="box_b" type="box" size="0.1 0.1 0.1" mass="2"/></body>
    <body name="cap_a" pos="1 0 0.05" euler="0 90 0"><freejoint/>
      <geom name="cap_a" type="capsule" size="0.05 0.2" mass="1"/></body>
    <body name="cap_b" pos="1 1 0.05" euler="90 0 0"><freejoint/>
      <geom name="cap_b" type="capsule" size="0.05 0.15" mass="1"/></body>
  </worldbody>
</mujoco>"""
B, STEPS = 8, 200


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(XML)


def sliding_x0(scene) -> np.ndarray:
    """Every body slides along x (world w a little faster), so friction acts."""
    x0 = initial_states(scene, B, 0, 0.0)
    nq = scene.model.nq
    for body in range(4):
        x0[:, nq + 6 * body] = 0.8 + 0.1 * np.arange(B)
    return x0


@pytest.fixture(scope="module")
def c_run(model, tmp_path_factory):
    scene = MjScene(model, backend="mujoco")
    path = str(tmp_path_factory.mktemp("contacts") / "c.h5")
    return rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, x0=sliding_x0(scene), record_every=10,
                   out=path, progress=False, outputs=["contacts"])


def test_c_contacts_equal_d_contact_and_mj_contactforce(model, c_run):
    slots, counts = c_run.outputs["contacts"], c_run.outputs["contacts_ncon"]
    with h5py.File(c_run.path, "r") as f:
        ws = f["carry"][()]  # qacc_warmstart after each recorded step: the live evaluation's warm start
    d, f6, worst, n_seen = mujoco.MjData(model), np.zeros(6), 0.0, 0
    for j in range(len(c_run.time)):
        for b in range(B):
            d.qpos[:], d.qvel[:], d.qacc_warmstart[:], d.time = c_run.qpos[j, b], c_run.qvel[j, b], ws[j, b], \
                c_run.time[j]
            mujoco.mj_forward(model, d)
            got = slots[j, b][slots[j, b, :, COL["valid"]] == 1]
            assert len(got) == d.ncon == counts[j, b, 0] and counts[j, b, 1] == d.nefc and counts[j, b, 2] == 0
            for s in got:
                i = int(s[COL["id"]])
                mujoco.mj_contactForce(model, d, i, f6)
                c = d.contact[i]
                assert (s[COL["geom1"]], s[COL["geom2"]]) == (c.geom1, c.geom2)
                worst = max(worst, np.abs(s[FORCE] - f6).max(), np.abs(s[POS] - c.pos).max(),
                            np.abs(s[FRAME] - c.frame).max(), abs(s[COL["dist"]] - c.dist))
                n_seen += 1
            keys = list(zip(got[:, COL["geom1"]], got[:, COL["geom2"]]))
            assert keys == sorted(keys)  # slot order: by (geom1, geom2)
    assert worst <= 1e-9, worst
    assert n_seen >= len(c_run.time) * B * 8  # boxes: 4 contacts each, capsules 1-2
    tangential = np.abs(slots[..., COL["force_tangent1"]:COL["force_tangent2"] + 1]).max()
    assert tangential > 0.5  # sliding: friction is in the forces
    assert c_run.stats["flagged"] == {}


def test_contacts_table_reads_back_with_names(c_run):
    from mjharness.rollout.h5 import open_rollout

    with open_rollout(c_run.path) as f:
        t = f.contacts(3, row=15)  # settled by then: every body on the floor
        assert f.contact_counts().shape == (len(c_run.time), B, 3)
        assert f.h5["outputs/contacts"].attrs["capacity"] == 12  # 2 boxes x 4 + 2 capsules x 2 (floor pairs)
    assert len(t) == c_run.outputs["contacts_ncon"][15, 3, 0] == 12
    assert set(t["geom1_name"]) == {"floor"} and set(t["geom2_name"]) == {"box_a", "box_b", "cap_a", "cap_b"}
    assert set(t["body2"]) == {"box_a", "box_b", "cap_a", "cap_b"} and set(t["body1"]) == {"world"}
    np.testing.assert_array_equal(t["force"], c_run.outputs["contacts"][15, 3, t["slot"], FORCE])


def test_plot_contacts_panels(c_run):
    from mjharness.rollout.cli import plots
    from mjharness.rollout.h5 import open_rollout

    with open_rollout(c_run.path) as f:
        fig = plots.figure(f, ["contacts"], worlds=[0, 1])
        count, force = plots.contact_series(f, f.model())
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["contacts: contacts per pair", "contacts: |force| per pair [N]"]
    assert count.components == ("floor–box_a", "floor–box_b", "floor–cap_a", "floor–cap_b", "ncon")
    np.testing.assert_array_equal(count.values[..., :4].sum(-1), count.values[..., 4])  # no overflow: all counted
    weight = 5 * 9.81
    assert 0.8 * weight < force.values[-1].sum(-1).min()  # the normal force alone carries the weight


def test_overflow_flags_exactly_those_worlds(model, capsys, tmp_path):
    """K = 5 slots: worlds whose bodies rest on the floor (12 contacts) overflow; worlds whose bodies start
    1 m up (no contact in 40 steps) do not; flagging changes no state and no other world's output. The run's
    summary and `mjharness show FILE` (recomputed from the file's counts) name the same worlds."""
    from mjharness.rollout.cli.app import main
    from mjharness.rollout.cli.run import _summary
    from mjharness.rollout.cli.summary import flagged_lines

    scene = MjScene(model, backend="mujoco")
    x0 = initial_states(scene, B, 0, 0.0)
    high = [1, 2, 5]
    for body in range(4):
        x0[high, 7 * body + 2] += 1.0
    small = rollout(scene, "semi_implicit_euler", steps=40, batch=B, x0=x0, record_every=10, progress=False,
                    outputs=["contacts:5"], out=str(tmp_path / "small.h5"))
    full = rollout(scene, "semi_implicit_euler", steps=40, batch=B, x0=x0, record_every=10, progress=False,
                   outputs=["contacts"], out=str(tmp_path / "full.h5"))
    low = [w for w in range(B) if w not in high]
    assert sorted(small.stats["flagged"]["contacts:5_ncon"]) == low
    assert all(v == (0, 4) for v in small.stats["flagged"]["contacts:5_ncon"].values())  # every row
    bits = small.outputs["contacts:5_ncon"][..., 2]
    assert np.all(bits[:, low] == 1) and np.all(bits[:, high] == 0)
    assert np.all(small.outputs["contacts:5_ncon"][:, low, 0] == 12)  # the real count, beyond K
    np.testing.assert_array_equal(small.x, full.x)
    np.testing.assert_array_equal(small.outputs["contacts:5"][:, high], full.outputs["contacts"][:, high, :5])
    np.testing.assert_array_equal(small.outputs["contacts:5"][:, low], full.outputs["contacts"][:, low, :5])
    line = flagged_lines(small.stats["flagged"])
    assert line == ["  contacts:5_ncon: contact overflow in 5 world(s): "
                    + ", ".join(f"world {w} (row 0, 4 rows)" for w in low)
                    + " -- raise K (--outputs contacts:K; `mjharness probe` reports the peak)"]
    _summary(small)
    assert line[0] in capsys.readouterr().out
    assert main(["show", small.path]) == 0
    shown = capsys.readouterr().out
    assert line[0] in shown and "contacts:\n" in shown
    assert main(["show", full.path]) == 0  # room for every contact
    assert "  contacts_ncon: no contact overflow (4 rows x 8 worlds)" in capsys.readouterr().out


def test_mjx_contacts_equal_mjx_forces(model, tmp_path):
    """Held to raw MJX (mjx.forward on the recorded state and warm start), not to C: MJX's box-plane and
    capsule-plane contacts are its own (DESIGN §7)."""
    from mujoco.mjx._src import support

    scene = MjScene(model, backend="mjx")
    r = rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, x0=sliding_x0(scene), record_every=40,
                out=str(tmp_path / "mjx.h5"), progress=False, outputs=["contacts"])
    with h5py.File(r.path, "r") as f:
        ws = f["carry"][()]
    m = scene.model
    mx = mjx.put_model(m)
    forward = jax.jit(mjx.forward)
    slots, worst, n_seen = r.outputs["contacts"], 0.0, 0
    d = mujoco.MjData(m)
    for j in range(len(r.time)):
        for b in range(B):
            d.qpos[:], d.qvel[:] = r.qpos[j, b], r.qvel[j, b]
            d.qacc_warmstart[:], d.time = ws[j, b], r.time[j]
            ref = forward(mx, mjx.put_data(m, d))
            con = ref._impl.contact
            valid = np.asarray(con.dist < con.includemargin)
            got = slots[j, b][slots[j, b, :, COL["valid"]] == 1]
            assert sorted(got[:, COL["id"]].astype(int).tolist()) == np.nonzero(valid)[0].tolist()
            for s in got:
                i = int(s[COL["id"]])
                f = np.asarray(support.contact_force(mx, ref, i))
                worst = max(worst, np.abs(s[FORCE] - f).max(), np.abs(s[POS] - np.asarray(con.pos[i])).max(),
                            np.abs(s[FRAME] - np.asarray(con.frame[i]).reshape(9)).max())
                n_seen += 1
    assert worst <= 1e-9, worst
    assert n_seen >= len(r.time) * B * 8
    assert np.abs(slots[..., COL["force_tangent1"]]).max() > 0.5  # sliding: friction


def test_output_names_and_capacity(model):
    slots, counts = parse_outputs(model, ["contacts:7"])
    assert slots.shape == (7, 23) and counts.name == "contacts:7_ncon" and counts.shape == (3,)
    assert parse_outputs(model, ["contacts"])[0].shape[0] == model_contact_bound(model, _contact_pairs(model)) == 12
    for bad in ("contacts:0", "contacts:x", "contacts:"):
        with pytest.raises(OutputError, match="positive number of slots"):
            parse_outputs(model, [bad])
    with pytest.raises(OutputError, match="asked twice"):
        parse_outputs(model, ["contacts", "contacts:4"])
    empty = contact_table(model, np.zeros((3, 23)))
    assert len(empty) == 0 and "force" in empty.dtype.names


def test_warp_buffers_from_model_and_probe(model):
    pairs = _contact_pairs(model)
    # 12 contacts a world (4 + 4 + 2 + 2); pyramidal condim 3: 4 rows each; no other constraints
    assert warp_buffers(model, pairs, worlds=10) == dict(naconmax=120, njmax=48)
    assert warp_buffers(model, pairs, worlds=10, peak_ncon=9, peak_nefc=30, headroom=1.5) == \
        dict(naconmax=140, njmax=45)
    box = mujoco.MjModel.from_xml_string(XML.replace('type="box"', 'type="box" condim="6"'))
    assert warp_buffers(box, pairs, worlds=1)["njmax"] == 12 * 2 * (6 - 1)  # every contact with the largest condim


def test_probe_command(capsys):
    from mjharness.rollout.cli.app import main

    assert main(["probe", XML, "--batch", "2", "--steps", "50", "--perturb-qpos", "0"]) == 0
    out = capsys.readouterr().out
    assert "peak over 2 worlds: ncon 12 (model bound 12), nefc 48" in out
    assert "use: --outputs contacts:18; warp: naconmax=36 (all 2 worlds), njmax=72 (per world)" in out
