"""Plots of a rollout file (``mjharness show FILE --plot ...``), as a reader needs them: each panel's y axis
names the quantity and its unit (from the dataset's ``units`` attribute, the sensor's MuJoCo type or the
joint's type), each panel has a legend naming its components (x/y/z, quaternion w/x/y/z, sensor columns,
contact pairs by geom names, joints), and the title says which worlds are drawn. ``band=True`` draws the
mean over the worlds with a ± one standard deviation band instead of one line per world, for many worlds.

``figure`` is pure up to reading the file: it returns a Matplotlib ``Figure`` (no pyplot, no global state),
which ``write_png`` saves; tests read the labels back from the Figure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import CliError

if TYPE_CHECKING:  # NumPy and MuJoCo load when a plot is made, not with the parser (mjharness --help)
    import numpy as np

MAX_PLOTTED_WORLDS = 8   # default worlds drawn one line each
LEGEND_COLUMNS = 6
LINE_STYLES = ("-", "--", ":", "-.")
STYLE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}

# MuJoCo sensor type -> SI unit of its values (mjtSensor; types not listed are shown without a unit).
SENSOR_UNITS = {
    "accelerometer": "m/s²", "velocimeter": "m/s", "gyro": "rad/s", "force": "N", "torque": "N m",
    "magnetometer": "T", "touch": "N", "rangefinder": "m", "jointpos": "rad | m", "jointvel": "rad/s | m/s",
    "tendonpos": "m", "tendonvel": "m/s", "actuatorpos": "actuator length", "actuatorvel": "actuator velocity",
    "actuatorfrc": "N | N m", "jointactfrc": "N | N m", "ballquat": "1", "ballangvel": "rad/s",
    "framepos": "m", "framequat": "1", "framexaxis": "1", "frameyaxis": "1", "framezaxis": "1",
    "framelinvel": "m/s", "frameangvel": "rad/s", "framelinacc": "m/s²", "frameangacc": "rad/s²",
    "subtreecom": "m", "subtreelinvel": "m/s", "subtreeangmom": "kg m²/s", "clock": "s", "e_potential": "J",
    "e_kinetic": "J",
}
# The suffix of a state name -> (unit, component names); hinge/slide joints are looked up by joint type.
STATE_KINDS = {
    "pos": ("m", ("x", "y", "z")), "quat": ("1", ("w", "x", "y", "z")), "vel": ("m/s", ("x", "y", "z")),
    "angvel": ("rad/s", ("x", "y", "z")),
}
JOINT_UNITS = {  # (mjtJoint name, "qpos" | "qvel") -> (unit, component names or None for the joint's name)
    ("mjJNT_HINGE", "qpos"): ("rad", None), ("mjJNT_HINGE", "qvel"): ("rad/s", None),
    ("mjJNT_SLIDE", "qpos"): ("m", None), ("mjJNT_SLIDE", "qvel"): ("m/s", None),
    ("mjJNT_BALL", "qpos"): ("1", ("w", "x", "y", "z")),
    ("mjJNT_BALL", "qvel"): ("rad/s", ("x", "y", "z")),
}


@dataclass(frozen=True)
class Series:
    """One panel: values (T, B, C) with a label per component and the unit of all of them."""

    name: str
    values: np.ndarray
    components: tuple
    unit: str = ""

    @property
    def ylabel(self) -> str:
        return f"{self.name} [{self.unit}]" if self.unit and self.unit != "1" else self.name


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _scale_labels(ds, axis: int) -> list:
    """The labels of a dataset's dimension scale on ``axis`` ([] without one)."""
    return [_text(x) for x in ds.dims[axis][0][()]] if ds.ndim > axis and len(ds.dims[axis]) else []


def _flat(v: np.ndarray) -> np.ndarray:
    return v.reshape(v.shape[:2] + (-1,))


def _components(labels, n: int, fallback: str) -> tuple:
    labels = tuple(labels)
    if len(labels) == n:
        return labels
    return (fallback,) if n == 1 else tuple(f"{fallback}[{i}]" for i in range(n))


def _state_series(f, model, name: str) -> Series:
    import mujoco

    v = _flat(f.state(name))  # KeyError naming the state and the layout: a user error
    joint, _, kind = name.rpartition("/")
    unit, comps = STATE_KINDS.get(kind, ("", None))
    j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, joint) if model is not None and joint else -1
    if kind in ("qpos", "qvel") and j >= 0:
        unit, comps = JOINT_UNITS.get((mujoco.mjtJoint(int(model.jnt_type[j])).name, kind), ("", None))
    return Series(name, v, _components(comps or (), v.shape[2], joint or name), unit)


def _segment_series(f, model, name: str) -> Series:
    """``qpos``, ``qvel`` or ``x`` whole: components named by joint (and axis) where the file says."""
    if name != "x" and name not in f.h5:
        raise CliError(f"{f.path}: no /{name} in this file")
    v = _flat(getattr(f, name))
    labels = _scale_labels(f.h5[name], 2) or _joint_labels(model, name)
    units = {"qpos": "rad | m", "qvel": "rad/s | m/s"}
    return Series(name, v, _components(labels, v.shape[2], name), units.get(name, ""))


def _joint_labels(model, name: str) -> list:
    """``joint`` or ``joint[i]`` per qpos (or qvel) coordinate, in MuJoCo order."""
    import mujoco

    if model is None or name not in ("qpos", "qvel"):
        return []
    adr, n = (model.jnt_qposadr, model.nq) if name == "qpos" else (model.jnt_dofadr, model.nv)
    ends = list(adr[1:]) + [n]
    labels: list[str] = []
    for j in range(model.njnt):
        jn = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"
        size = int(ends[j] - adr[j])
        labels += [jn] if size == 1 else [f"{jn}[{k}]" for k in range(size)]
    return labels


def _sensor_series(f, name: str) -> Series:
    sname = name[len("sensor:"):]
    rows = {r["name"]: r for r in f.sensors}
    try:
        v = _flat(f.output(name) if name in f.output_names else f.sensor(sname))
    except KeyError as e:
        raise CliError(_text(e.args[0])) from None
    typ = rows[sname]["type"] if sname in rows else ""
    axes = {3: ("x", "y", "z"), 4: ("w", "x", "y", "z")}.get(v.shape[2], ())
    return Series(name, v, _components(axes, v.shape[2], sname), SENSOR_UNITS.get(typ, ""))


def _pair_names(ds, model) -> list:
    """Contact pairs by geom names (``floor–ball``); the file stores geom ids in ``pair_geom``."""
    import mujoco
    import numpy as np

    from mjharness.rollout.h5.format import array_attr

    pairs = array_attr(ds, "pair_geom")
    if pairs is None or model is None:
        return []
    pairs = np.asarray(pairs).reshape(-1, 2)
    name = lambda g: mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, int(g)) or f"geom{int(g)}"
    return [f"{name(a)}–{name(b)}" for a, b in pairs]


def _output_series(f, model, name: str) -> Series:
    """A recorded output ``<field>`` or one row of it ``<field>:<object>`` (``xpos:<body>``)."""
    field, _, obj = name.partition(":") if name not in f.output_names else (name, "", "")
    ds = f.h5["outputs"][field]
    unit = _text(ds.attrs.get("units", ""))
    if obj:
        rows = _scale_labels(ds, 2)
        if obj not in rows:
            raise CliError(f"{f.path}: output {field!r} has no row {obj!r} (rows: {rows})")
        v = _flat(f.output(field)[:, :, rows.index(obj)])
        return Series(name, v, _components(_scale_labels(ds, 3), v.shape[2], name), unit)
    v = _flat(f.output(field))
    if field == "contact_force":
        labels = _pair_names(ds, model)
    elif ds.ndim == 3:
        labels = _scale_labels(ds, 2)
    else:  # (T, B, rows, comps): row:component
        labels = [f"{r}:{c}" for r in _scale_labels(ds, 2) for c in _scale_labels(ds, 3)]
    return Series(name, v, _components(labels, v.shape[2], name), unit)


def series(f, name: str, model=None) -> Series:
    """The panel for ``name``: a state of the layout, ``qpos``/``qvel``/``x``, ``sensor:<name>``, a recorded
    output or one row of it (``xpos:<body>``)."""
    if name in ("qpos", "qvel", "x"):
        return _segment_series(f, model, name)
    if name.startswith("sensor:"):
        return _sensor_series(f, name)
    if name in f.output_names or name.split(":")[0] in f.output_names:
        return _output_series(f, model, name)
    return _state_series(f, model, name)


def contact_series(f, model=None) -> tuple[Series, Series]:
    """``--plot contacts``: two panels from the contacts output, one component per geom pair (by geom names,
    the pairs seen in any valid slot): contacts per pair (and ``ncon``, all contacts: more than the pairs
    when slots overflowed) and the pair's force magnitude, the sum over its contacts of |(normal, tangent1,
    tangent2)| in N."""
    import mujoco
    import numpy as np

    from mjharness.adapters.contacts import COL, FORCE

    name = f.contacts_output()
    slots = f.output(name)  # (T, B, K, columns)
    valid = slots[..., COL["valid"]] == 1
    g1, g2 = slots[..., COL["geom1"]].astype(np.int64), slots[..., COL["geom2"]].astype(np.int64)
    pairs = sorted({(int(a), int(b)) for a, b in zip(g1[valid], g2[valid])})
    geom = (lambda g: mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or f"geom{g}") if model is not None \
        else (lambda g: f"geom{g}")
    labels = tuple(f"{geom(a)}–{geom(b)}" for a, b in pairs)
    magnitude = np.where(valid, np.linalg.norm(slots[..., FORCE][..., :3], axis=-1), 0.0)
    count = np.zeros(slots.shape[:2] + (len(pairs),))
    force = np.zeros_like(count)
    for i, (a, b) in enumerate(pairs):
        hit = valid & (g1 == a) & (g2 == b)
        count[..., i], force[..., i] = hit.sum(axis=-1), np.where(hit, magnitude, 0.0).sum(axis=-1)
    ncon = f.output(f"{name}_ncon")[..., :1]
    return (Series(f"{name}: contacts per pair", np.concatenate([count, ncon], axis=-1), labels + ("ncon",), "1"),
            Series(f"{name}: |force| per pair", force, labels, "N"))


def plot_names(f) -> dict[str, list[str]]:
    """What ``--plot`` accepts for the open file ``f``, by kind (the lists an error names)."""
    return {"states": [_text(r["name"]) for r in f.layout_table], "segments": ["qpos", "qvel", "x"],
            "outputs": list(f.output_names), "sensors": [f"sensor:{r['name']}" for r in f.sensors]}


def check_names(f, names) -> None:
    """Refuse a ``--plot`` name the file does not hold (before anything is printed or drawn), naming what it
    holds: the states, the qpos/qvel/x segments, the recorded outputs (``<output>`` or ``<output>:<object>``) and
    the sensors."""
    known = plot_names(f)
    flat = {n for group in known.values() for n in group}
    for name in names:
        if name in flat or name.split(":")[0] in known["outputs"]:
            continue
        held = "; ".join(f"{kind}: {', '.join(group)}" for kind, group in known.items() if group)
        raise CliError(f"--plot {name!r}: {f.path} has no such state or output ({held})")


def panels(f, name: str, model=None) -> tuple:
    """The panels ``--plot name`` draws: two for the contacts output, else one (``series``)."""
    if name in f.output_names and _text(f.h5["outputs"][name].attrs.get("mujoco_field", "")) == "contacts":
        return contact_series(f, model)
    return (series(f, name, model),)


def parse_worlds(tokens, batch: int) -> list | None:
    """``--worlds`` tokens (``0:8``, ``3``, ``0,3,7``) -> world indices, each checked against ``batch``."""
    if not tokens:
        return None
    worlds = []
    for tok in (t for token in tokens for t in str(token).split(",") if t):
        try:
            if ":" in tok:
                a, b = tok.split(":", 1)
                worlds += list(range(int(a or 0), int(b) if b else batch))
            else:
                worlds.append(int(tok))
        except ValueError:
            raise CliError(f"--worlds {tok!r}: give indices (3), ranges (0:8) or lists (0,3,7)") from None
    bad = [w for w in worlds if not 0 <= w < batch]
    if bad or not worlds:
        raise CliError(f"--worlds {' '.join(map(str, tokens))}: the file has worlds 0..{batch - 1}")
    return worlds


def _worlds_text(worlds: list, batch: int) -> str:
    contiguous = worlds == list(range(worlds[0], worlds[0] + len(worlds)))
    which = (f"world {worlds[0]}" if len(worlds) == 1 else f"worlds {worlds[0]}–{worlds[-1]}" if contiguous
             else "worlds " + ", ".join(map(str, worlds)))
    return f"{which} of {batch}"


def _draw_lines(ax, t, s: Series, worlds, colors) -> None:
    for k, w in enumerate(worlds):
        style = LINE_STYLES[k % len(LINE_STYLES)] if len(worlds) <= len(LINE_STYLES) else "-"
        alpha = 1.0 if len(worlds) <= len(LINE_STYLES) else 0.5
        for c in range(s.values.shape[2]):
            ax.plot(t, s.values[:, w, c], color=colors[c], ls=style, lw=0.9, alpha=alpha,
                    label=s.components[c] if k == 0 else None)


def _draw_band(ax, t, s: Series, worlds, colors) -> None:
    import numpy as np

    v = s.values[:, worlds, :]
    mean, std = np.nanmean(v, axis=1), np.nanstd(v, axis=1)
    for c in range(v.shape[2]):
        ax.plot(t, mean[:, c], color=colors[c], lw=1.2, label=f"{s.components[c]} mean")
        ax.fill_between(t, mean[:, c] - std[:, c], mean[:, c] + std[:, c], color=colors[c], alpha=0.25, lw=0)


def figure(f, names, worlds=None, band: bool = False):
    """The Figure for an open rollout file ``f``: one panel per name, time in seconds on the shared x axis.
    ``worlds``: indices (default: every world with ``band``, else the first ``MAX_PLOTTED_WORLDS``)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    batch = f.batch
    worlds = list(range(batch if band else min(batch, MAX_PLOTTED_WORLDS))) if worlds is None else list(worlds)
    parse_worlds([",".join(map(str, worlds))], batch)  # the same range check as the CLI's
    model = f.model()
    drawn = [p for name in names for p in panels(f, name, model)]
    t = f.time
    fig = Figure(figsize=(9, 2.4 + 2.2 * len(drawn)), layout="constrained")
    axes = fig.subplots(len(drawn), 1, sharex=True, squeeze=False)[:, 0]
    palette = colormaps["tab10"] if max(p.values.shape[2] for p in drawn) <= 10 else colormaps["tab20"]
    for ax, s in zip(axes, drawn):
        colors = [palette(c % palette.N) for c in range(s.values.shape[2])]
        (_draw_band if band else _draw_lines)(ax, t, s, worlds, colors)
        ax.set_ylabel(s.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=min(LEGEND_COLUMNS, s.values.shape[2]), loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    axes[-1].set_xlabel("time [s]")
    how = "mean ± std over " if band else ""
    styles = "" if band or len(worlds) == 1 or len(worlds) > len(LINE_STYLES) else \
        " (" + ", ".join(f"{STYLE_NAMES[st]} w{w}" for st, w in zip(LINE_STYLES, worlds)) + ")"
    fig.suptitle(f"{os.path.basename(f.path)}: {how}{_worlds_text(worlds, batch)}{styles}")
    return fig


def write_png(f, names, png: str, worlds=None, band: bool = False) -> str:
    """Draw ``figure(f, names, worlds, band)`` into ``png`` (headless: the Figure has the Agg canvas)."""
    fig = figure(f, names, worlds, band)
    fig.savefig(png, dpi=100)
    return png
