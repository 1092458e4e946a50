"""The file's ``/sensors/table`` is MuJoCo's sensor model, row for row (issue 29, item 5): type names as MuJoCo
spells them (``mjtSensor`` without ``mjSENS_``, lowercased), and name, adr, dim, object as in ``mjModel``."""

import h5py
import mujoco
import pytest

from mjharness.adapters import MjScene
from mjharness.rollout import rollout
from mjharness.rollout.h5.tables import read_table

# One sensor of each common family: site-based (accelerometer, gyro, touch, force), joint-based (jointpos,
# jointvel), frame sensors on a body and a site, and a subtree sensor -- types whose names once lost a letter.
XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body name="arm" pos="0 0 0.5">
      <joint name="elbow" type="hinge" axis="0 1 0"/>
      <geom name="link" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
      <site name="tip" pos="0.3 0 0"/>
      <site name="pad" type="box" size="0.04 0.04 0.04" pos="0.3 0 0"/>
    </body>
  </worldbody>
  <actuator><motor joint="elbow" name="m"/></actuator>
  <sensor>
    <accelerometer name="acc" site="tip"/>
    <gyro name="gyro" site="tip"/>
    <touch name="touch" site="pad"/>
    <force name="force" site="tip"/>
    <jointpos name="q" joint="elbow"/>
    <jointvel name="qd" joint="elbow"/>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
    <framequat name="arm_quat" objtype="body" objname="arm"/>
    <subtreecom name="com" body="arm"/>
    <actuatorfrc name="motor_force" actuator="m"/>
  </sensor>
</mujoco>"""


def _expected(m: mujoco.MjModel) -> list[tuple]:
    """What MuJoCo itself says about each sensor, in the table's column order."""
    rows = []
    for i in range(m.nsensor):
        objtype = mujoco.mjtObj(int(m.sensor_objtype[i]))
        obj = mujoco.mj_id2name(m, objtype, int(m.sensor_objid[i]))
        rows.append((mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SENSOR, i),
                     mujoco.mjtSensor(int(m.sensor_type[i])).name.removeprefix("mjSENS_").lower(),
                     f"{objtype.name.removeprefix('mjOBJ_').lower()}:{obj}",
                     int(m.sensor_adr[i]), int(m.sensor_dim[i])))
    return rows


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    model = mujoco.MjModel.from_xml_string(XML)
    path = tmp_path_factory.mktemp("sensors") / "s.h5"
    # MuJoCo C: the table does not depend on the backend, and C needs no compile.
    rollout(MjScene(model, backend="mujoco"), "euler", steps=2, batch=1, out=str(path), progress=False,
            outputs=("sensordata",))
    with h5py.File(path, "r") as f:
        rows = read_table(f["sensors/table"])  # a group of columns (format 2) or a compound dataset (1)
    dec = lambda v: v.decode() if isinstance(v, bytes) else v
    return model, [tuple(dec(r[k]) for k in ("name", "type", "object")) + (int(r["adr"]), int(r["dim"]))
                   for r in rows]


def test_sensor_table_equals_mjmodel(table):
    model, rows = table
    assert rows == _expected(model)


def test_sensor_type_names_are_mujocos(table):
    _, rows = table
    assert [r[1] for r in rows] == ["accelerometer", "gyro", "touch", "force", "jointpos", "jointvel", "framepos",
                                    "framequat", "subtreecom", "actuatorfrc"]
