"""Batched Monte Carlo: dispersed spheres dropped through the US 1976 atmosphere, impact points from one file.

    python -m mjharness.examples.monte_carlo_spheres --worlds 10000 --backend mujoco --out spheres.h5 --png impact.png

Each world is a 0.15 m sphere dropped over (40 N, 75 W) in the ECI frame (``scene.set_flight``: WGS-84, the
atmosphere turning with the Earth). Dispersed per world: the mass (``randomize`` of ``body_mass:ball``), the drag
coefficient and the wind (force provider parameters ``force:drag.CD``, ``force:drag.wind[0..1]``, drawn by
``randomize``), the initial altitude and velocity (initial states, drawn by ``initial_states`` from the same seed
and the world's global index). The drag provider is NumPy on MuJoCo C's whole batch and the same code traced per world
on MJX. Gravity is MuJoCo's uniform ``opt.gravity``, set to the point-mass gravitation at the nominal release point
(in ECI): over a drop of a few km its direction changes by < 1e-3 rad and its size by < 1e-3, which this example
accepts. The file records the geodetic position; impact points are where the altitude crosses 0 (linear
interpolation between recorded rows).
"""

from __future__ import annotations

import argparse

import numpy as np

LAT, LON, ALT = 40.0, -75.0, 1000.0          # nominal release point [deg, deg, m]
RADIUS, MASS = 0.15, 5.0                     # sphere [m, kg]
RANDOMIZE = {"body_mass:ball": "*uniform(0.9, 1.1)", "force:drag.CD": "normal(0.47, 0.03)",
             "force:drag.wind[0]": "normal(0, 5)", "force:drag.wind[1]": "normal(5, 3)"}


def xml() -> str:
    import mjharness
    from mjharness.environment import WGS84, geodetic_to_ecef, point_mass_acceleration

    mjharness.configure()  # float64 before the first JAX array
    r = np.asarray(geodetic_to_ecef(np.radians(LAT), np.radians(LON), ALT, WGS84))
    g = np.asarray(point_mass_acceleration(r, WGS84))
    return (f'<mujoco><option gravity="{float(g[0])!r} {float(g[1])!r} {float(g[2])!r}" timestep="0.05"/><worldbody>'
            f'<body name="ball"><freejoint name="ball"/><geom type="sphere" size="{RADIUS}" mass="{MASS}" '
            f'contype="0" conaffinity="0"/></body></worldbody></mujoco>')


def _drag_eci(t, r, v, cd, area, wind):
    """Drag [N] in ECI of the US 1976 air turning with the Earth, the NED wind ``wind`` included; leading axes free."""
    import jax.numpy as jnp

    from mjharness.environment import (
        WGS84,
        StandardAtmosphere1976,
        air_relative_velocity,
        drag_force,
        ecef_to_geodetic,
        eci_to_ecef,
        eci_to_ecef_matrix,
    )

    r_ecef, v_ecef = eci_to_ecef(t, r, v, WGS84)
    lat, lon, _ = ecef_to_geodetic(r_ecef, WGS84)
    air = StandardAtmosphere1976(planet=WGS84)(t, r_ecef)
    f_ecef = drag_force(air_relative_velocity(v_ecef, wind, lat, lon), air.density, cd, area)
    return jnp.einsum("...ji,...j->...i", eci_to_ecef_matrix(t, WGS84), f_ecef)


_DRAG = None


def drag(t, x, data, p):
    """The drag provider: NumPy arrays of the batch on MuJoCo C (one jitted call a stage: eager JAX would dispatch
    every small op), traced per world on MJX."""
    global _DRAG
    import jax
    import jax.numpy as jnp

    if _DRAG is None:
        _DRAG = jax.jit(_drag_eci)
    f = _DRAG(t, data.qpos[..., 0:3], data.qvel[..., 0:3], p["CD"], p["area"], p["wind"])
    z = jnp.zeros_like(f)
    w = jnp.stack([jnp.concatenate([z, z], -1), jnp.concatenate([f, z], -1)], -2)
    return np.asarray(w) if isinstance(data.qvel, np.ndarray) else w


def scene(backend: str):
    """The sphere scene with its drag provider and flight frame."""
    from mjharness.adapters import MjScene

    s = MjScene(xml(), backend=backend)
    s.add_force(drag, name="drag", params={"CD": 0.47, "area": np.pi * RADIUS ** 2, "wind": [0.0, 0.0, 0.0]})
    s.set_flight(joint="ball")
    return s


def initial_states(s, worlds: int, seed: int) -> np.ndarray:
    """Release states: altitude ALT + N(0, 100) m, NED velocity (N(20, 5), N(0, 5), 0) m/s, per world from
    ``default_rng([seed, world, 1])`` (global index: the same draws on every backend and batch split)."""
    from mjharness.environment import inertial_state

    draws = np.array([np.random.default_rng([seed, w, 1]).normal([0.0, 20.0, 0.0], [100.0, 5.0, 5.0])
                      for w in range(worlds)])
    alt = ALT + draws[:, 0]
    v_ned = np.stack([draws[:, 1], draws[:, 2], np.zeros(worlds)], -1)
    r, v, q = inertial_state(np.radians(LAT), np.radians(LON), alt, v_ned, np.zeros((worlds, 3)))
    x = np.repeat(s.x0()[None], worlds, axis=0)
    x[:, 0:3], x[:, 3:7], x[:, 7:10] = np.asarray(r), np.asarray(q), np.asarray(v)
    return x


def run(worlds: int = 10000, backend: str = "mujoco", out: str | None = None, seed: int = 0, seconds: float = 40.0,
        dt: float = 0.05, record_every: int = 4, **kw):
    """One rollout of ``worlds`` dispersed spheres (RK4), recording the geodetic position."""
    from mjharness.rollout import rollout

    s = scene(backend)
    steps = int(round(seconds / dt / record_every)) * record_every
    return rollout(s, "rk4", dt=dt, steps=steps, x0=initial_states(s, worlds, seed), seed=seed, randomize=RANDOMIZE,
                   outputs=("geodetic",), record_every=record_every, out=out, **kw)


def impact_points(geodetic: np.ndarray) -> np.ndarray:
    """(B, 2) latitude, longitude [rad] where each world's altitude first crosses 0 (linear interpolation between
    the recorded rows ``geodetic`` (T, B, 3)); NaN for a world that did not land."""
    alt = geodetic[..., 2]
    below = alt <= 0
    landed = below.any(axis=0)
    k = np.argmax(below, axis=0)                                  # first row at or below 0
    b = np.arange(alt.shape[1])
    k0 = np.maximum(k - 1, 0)
    a0, a1 = alt[k0, b], alt[k, b]
    w = np.where(a0 != a1, a0 / np.where(a0 != a1, a0 - a1, 1.0), 1.0)[:, None]
    pts = geodetic[k0, b, :2] + w * (geodetic[k, b, :2] - geodetic[k0, b, :2])
    return np.where(landed[:, None], pts, np.nan)


def plot(path: str, png: str) -> np.ndarray:
    """The impact-point scatter of a file (east/north offsets [m] from the mean impact point) into ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mjharness.rollout import open_rollout

    pts = impact_points(np.asarray(open_rollout(path).output("geodetic")))
    lat0, lon0 = np.nanmean(pts, axis=0)
    north = (pts[:, 0] - lat0) * 6371e3
    east = (pts[:, 1] - lon0) * 6371e3 * np.cos(lat0)
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(east, north, s=2, alpha=0.4)
    ax.set(xlabel="east of mean impact [m]", ylabel="north of mean impact [m]", aspect="equal",
           title=f"{np.isfinite(pts[:, 0]).sum()} dispersed spheres")
    fig.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return pts


def main(argv=None) -> None:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--worlds", type=int, default=10000)
    a.add_argument("--backend", default="mujoco", choices=("mujoco", "mjx"))
    a.add_argument("--out", default="spheres.h5")
    a.add_argument("--png", default="impact.png")
    a.add_argument("--seed", type=int, default=0)
    args = a.parse_args(argv)
    run(args.worlds, args.backend, args.out, args.seed, overwrite=True)
    pts = plot(args.out, args.png)
    print(f"{np.isfinite(pts[:, 0]).sum()} of {args.worlds} landed; scatter in {args.png}")


if __name__ == "__main__":
    main()
