"""Batched Monte Carlo: dispersed spheres dropped through the US 1976 atmosphere, impact points from one file.

    python -m mjharness.examples.monte_carlo_spheres --worlds 10000 --backend mujoco --out spheres.h5 --png impact.png

Each world is a 0.15 m sphere released over (40 N, 75 W) in the ECI frame (``scene.set_flight``: WGS-84, the
atmosphere turning with the Earth). Two force providers act on it at every stage: ``gravity``, the point-mass
gravitation -m GM r/|r|^3 of the world's own mass (MuJoCo's uniform ``opt.gravity`` is 0), and ``drag``, drag in the
US 1976 air with a NED wind. Dispersed per world:

- the drag coefficient and the horizontal wind: force provider parameters ``force:drag.CD``, ``force:drag.wind[0]``
  and ``force:drag.wind[1]``, drawn by ``randomize`` (``RANDOMIZE``);
- the mass: drawn by this example per world (``draws``) and given explicitly as ``model_params`` twice, as the
  model field ``body_mass`` (the dynamics) and as the gravity provider's parameter ``force:gravity.mass`` (a
  provider cannot read a world's model fields, so a ``randomize`` of ``body_mass`` alone could not reach it);
- the release altitude and velocity: initial states (``initial_states``).

The example's draws come from ``numpy.random.default_rng([seed, world, k])`` with the world's global index, and the
``randomize`` draws are keyed the same way: the same worlds on every backend and batch split. The providers are
NumPy of the whole batch on MuJoCo C (``drag`` is ``batch_jit``: one jitted JAX function per stage, where eager JAX
would dispatch every small operation, its batch split over the CPUs) and the same code traced per world on MJX. The
file records the geodetic position every ``record_every`` steps; an impact point is where the altitude crosses 0, by
linear interpolation between the recorded rows (``impact_points``). Guide: docs/environment.md, "Monte Carlo".
"""

from __future__ import annotations

import argparse

import numpy as np

LAT, LON, ALT = 40.0, -75.0, 1000.0          # nominal release point [deg, deg, m]
RADIUS, MASS = 0.15, 5.0                     # sphere [m, kg]
RANDOMIZE = {"force:drag.CD": "normal(0.47, 0.03)", "force:drag.wind[0]": "normal(0, 5)",
             "force:drag.wind[1]": "normal(5, 3)"}


def xml(gravity: bool = False) -> str:
    """The sphere's MJCF. ``gravity``: MuJoCo's uniform gravity set to the point-mass gravitation at the nominal
    release point (the benchmark's run without providers); else none (the ``gravity`` provider gives it)."""
    g = np.zeros(3)
    if gravity:
        import mjharness
        from mjharness.environment import WGS84, geodetic_to_ecef, point_mass_acceleration

        mjharness.configure()  # float64 before the first JAX array
        g = np.asarray(point_mass_acceleration(geodetic_to_ecef(np.radians(LAT), np.radians(LON), ALT, WGS84)))
    return (f'<mujoco><option gravity="{float(g[0])!r} {float(g[1])!r} {float(g[2])!r}" timestep="0.05"/><worldbody>'
            f'<body name="ball"><freejoint name="ball"/><geom type="sphere" size="{RADIUS}" mass="{MASS}" '
            f'contype="0" conaffinity="0"/></body></worldbody></mujoco>')


def _wrench(f, data):
    """(..., nbody=2, 6): force ``f`` (..., 3) on body 1 at its centre (the sphere's), nothing on the world body."""
    if isinstance(f, np.ndarray):
        w = np.zeros(f.shape[:-1] + (2, 6))
        w[..., 1, :3] = f
        return w
    import jax.numpy as jnp

    z = jnp.zeros_like(f)
    return jnp.stack([jnp.concatenate([z, z], -1), jnp.concatenate([f, z], -1)], -2)


def _drag_eci(t, r, v, cd, area, wind):
    """Drag [N] in ECI of the US 1976 air turning with the Earth, the NED wind ``wind`` included; leading axes free."""
    import jax.numpy as jnp

    from mjharness.environment import (
        WGS84,
        drag_force,
        eci_to_ecef,
        eci_to_ecef_matrix,
        geodetic_frame,
        subtract_wind,
        us1976,
    )

    r_ecef, v_ecef = eci_to_ecef(t, r, v, WGS84)
    # the NED frame and the height from sines and cosines (geodetic_frame), never the angles; us1976 of the height
    # is StandardAtmosphere1976's density: 2.1 ms a stage for 10,000 worlds on one thread, 4.3-4.8 ms through the
    # angles (XLA on the CPU, measured)
    c_ned, alt = geodetic_frame(r_ecef, WGS84)
    f_ecef = drag_force(subtract_wind(v_ecef, wind, c_ned), us1976(alt).density, cd, area)
    return jnp.einsum("...ji,...j->...i", eci_to_ecef_matrix(t, WGS84), f_ecef)


_DRAG = None


def drag(t, x, data, p):
    """The drag provider (parameters CD, area [m2], wind [m/s, NED]): ``batch_jit`` of ``_drag_eci``, traced per world
    on MJX, one jitted call a stage on MuJoCo C's batch (split over the CPUs)."""
    global _DRAG
    if _DRAG is None:
        from mjharness.adapters.forces import batch_jit

        _DRAG = batch_jit(_drag_eci)
    return _wrench(_DRAG(t, data.qpos[..., 0:3], data.qvel[..., 0:3], p["CD"], p["area"], p["wind"]), data)


def gravity(t, x, data, p):
    """The gravity provider (parameter mass [kg]): -m GM r/|r|^3 at the sphere's centre (ECI; a point-mass field is
    the same in every frame with the planet's centre at the origin). Plain array arithmetic: NumPy on MuJoCo C's
    batch, JAX when traced on MJX."""
    from mjharness.environment import WGS84

    r = data.qpos[..., 0:3]
    r2 = (r * r).sum(-1)[..., None]
    r2 = r2 + (r2 == 0)  # 1 where r = 0 (add_force's shape check calls it at the default state, the origin), else r2
    return _wrench(-WGS84.gm * p["mass"][..., None] * r / (r2 * r2 ** 0.5), data)


def scene(backend: str, providers: tuple = ("gravity", "drag")):
    """The sphere scene with the providers named (MuJoCo's uniform gravity stands in when ``gravity`` is not among
    them) and the flight frame."""
    from mjharness.adapters import MjScene

    s = MjScene(xml(gravity="gravity" not in providers), backend=backend)
    if "gravity" in providers:
        s.add_force(gravity, name="gravity", params={"mass": MASS}, param_units={"mass": "kg"})
    if "drag" in providers:
        s.add_force(drag, name="drag", params={"CD": 0.47, "area": np.pi * RADIUS ** 2, "wind": [0.0, 0.0, 0.0]},
                    param_units={"CD": "1", "area": "m2", "wind": "m/s"})
    s.set_flight(joint="ball")
    return s


def draws(worlds: int, seed: int, alt: float = ALT) -> dict:
    """The example's own draws of each world w from ``default_rng([seed, w, 1])`` (global index: the same on every
    backend and batch split): release altitude alt * (1 + N(0, 0.1)) m (1000 m: sigma 100 m), NED velocity
    (N(20, 5), N(0, 5), 0) m/s, mass MASS * U(0.9, 1.1) kg."""
    rngs = [np.random.default_rng([seed, w, 1]) for w in range(worlds)]
    d = np.array([np.concatenate([g.normal([0.0, 20.0, 0.0], [0.1, 5.0, 5.0]), g.uniform(0.9, 1.1, 1)]) for g in rngs])
    return {"alt": alt * (1.0 + d[:, 0]), "v_ned": np.stack([d[:, 1], d[:, 2], np.zeros(worlds)], -1),
            "mass": MASS * d[:, 3]}


def initial_states(s, d: dict) -> np.ndarray:
    """Release states (ECI, at rest in the Earth-fixed frame but for the drawn NED velocity) of the draws ``d``."""
    from mjharness.environment import inertial_state

    n = len(d["alt"])
    r, v, q = inertial_state(np.radians(LAT), np.radians(LON), d["alt"], d["v_ned"], np.zeros((n, 3)))
    x = np.repeat(s.x0()[None], n, axis=0)
    x[:, 0:3], x[:, 3:7], x[:, 7:10] = np.asarray(r), np.asarray(q), np.asarray(v)
    return x


def run(worlds: int = 10000, backend: str = "mujoco", out: str | None = None, seed: int = 0, seconds: float = 40.0,
        dt: float = 0.05, record_every: int = 4, alt: float = ALT, **kw):
    """One rollout of ``worlds`` dispersed spheres released at about ``alt`` [m] (RK4, ``seconds`` of flight; a
    world still in the air then has no impact point), recording the geodetic position; ``kw`` go to ``rollout``."""
    from mjharness.rollout import rollout

    s = scene(backend)
    d = draws(worlds, seed, alt)
    body_mass = np.repeat(s.model.body_mass[None], worlds, axis=0)
    body_mass[:, 1] = d["mass"]
    steps = int(round(seconds / dt / record_every)) * record_every
    return rollout(s, "rk4", dt=dt, steps=steps, x0=initial_states(s, d), seed=seed, randomize=RANDOMIZE,
                   model_params={"body_mass": body_mass, "force:gravity.mass": d["mass"]},
                   outputs=("geodetic",), record_every=record_every, out=out, **kw)


def impact_points(geodetic: np.ndarray) -> np.ndarray:
    """(B, 2) latitude, longitude [rad] where each world's altitude first crosses 0 (linear interpolation between
    the recorded rows ``geodetic`` (T, B, 3)); NaN for a world that did not land."""
    alt = geodetic[..., 2]
    below = alt <= 0
    landed = np.asarray(below.any(axis=0))
    k = np.argmax(below, axis=0)                                  # first row at or below 0
    b = np.arange(alt.shape[1])
    k0 = np.maximum(k - 1, 0)
    a0, a1 = alt[k0, b], alt[k, b]
    w = np.where(a0 != a1, a0 / np.where(a0 != a1, a0 - a1, 1.0), 1.0)[:, None]
    pts = geodetic[k0, b, :2] + w * (geodetic[k, b, :2] - geodetic[k0, b, :2])
    return np.where(landed[:, None], pts, np.nan)


def plot(path: str, png: str) -> np.ndarray:
    """The impact-point scatter of a file (east/north offsets [m] from the mean impact point, on a sphere of the
    Earth's mean radius: fine at this scale) into ``png``; returns the impact points (B, 2) [rad]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mjharness.rollout import open_rollout

    pts = impact_points(np.asarray(open_rollout(path).output("geodetic")))
    lat0, lon0 = np.nanmean(pts, axis=0)
    north = (pts[:, 0] - lat0) * 6371e3
    east = (pts[:, 1] - lon0) * 6371e3 * np.cos(lat0)
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(east, north, s=2, alpha=0.3, linewidths=0)
    ax.set(xlabel="east of mean impact [m]", ylabel="north of mean impact [m]", aspect="equal",
           title=f"impact points of {np.isfinite(pts[:, 0]).sum()} dispersed spheres")
    fig.savefig(png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return pts


def main(argv=None) -> None:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--worlds", type=int, default=10000)
    a.add_argument("--backend", default="mujoco", choices=("mujoco", "mjx"))
    a.add_argument("--out", default="spheres.h5")
    a.add_argument("--png", default="impact.png")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--seconds", type=float, default=40.0, help="simulated time [s] (a 1 km drop lands in ~25 s)")
    args = a.parse_args(argv)
    run(args.worlds, args.backend, args.out, args.seed, args.seconds, overwrite=True)
    pts = plot(args.out, args.png)
    print(f"{np.isfinite(pts[:, 0]).sum()} of {args.worlds} landed; scatter in {args.png}")


if __name__ == "__main__":
    main()
