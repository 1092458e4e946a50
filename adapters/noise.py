"""Noise models of an ``MjScene`` (the class delegates ``add_joint_noise``, ``add_body_noise``,
``diffusion`` and ``drift_diffusion`` here).

Every MuJoCo noise source is one Wiener process W_k pushing a generalized force b_k σ_k dW_k;
the velocities move by M(q)⁻¹ b_k σ_k dW_k (M from ``mjx.forward``'s factorisation, solved with
MJX's ``solve_m``), the positions get no diffusion (dq = v dt). M⁻¹ couples every dof of a
kinematic tree, so a source registers one local noise source on *each velocity state of its tree*
and shares them (``registry.share_noise``): one global slot, packed diffusion only over that tree.

- joint noise ``add_joint_noise(joint, sigma)``: one source per dof of the joint, b = unit vector
  of that dof (``sigma`` scalar or one per dof); units of generalized force (N or N m) per √s.
- body noise ``add_body_noise(body, force_sigma, torque_sigma)``: six sources, a force along the
  world x, y, z axes applied at the body's centre of mass (``xipos``) and a torque about the world
  x, y, z axes; b = J_bodyᵀ e_c with MJX's ``support.jac`` at ``xipos``.

Since M and J depend on qpos only and qpos carries no noise, the MuJoCo noise is the same in the
Itô and Stratonovich senses. Extra states (``add_state(..., diffusion_fn=...)``) carry their own
diffusion ``diffusion_fn(t, value, data) -> (noise_count, *diffusion_shape)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators import StateError, StateSpec

from .backends.host import HostData

_JNT = mujoco.mjtJoint


@dataclass(frozen=True)
class NoiseSource:
    """One Wiener process acting on the MuJoCo velocities."""

    kind: str  # "joint" | "body"
    name: str  # joint or body name
    component: int  # joint: dof within the joint; body: 0-2 force x/y/z, 3-5 torque x/y/z (world axes)
    sigma: float
    endpoints: tuple[tuple[str, int], ...]  # (velocity state, local source) sharing this process


@dataclass
class SceneNoise:
    sources: list[NoiseSource] = field(default_factory=list)
    extras: dict[str, Callable] = field(default_factory=dict)


def scene_noise(scene) -> SceneNoise:
    """The noise models of ``scene`` (created on first use)."""
    noise = scene.__dict__.get("_noise")
    if noise is None:
        noise = scene._noise = SceneNoise()
    return noise


def velocity_blocks(scene) -> list[tuple[str, np.ndarray]]:
    """(velocity state, its dof indices) for every joint, in MuJoCo order."""
    out = []
    for js in scene.joints:
        if js.type == _JNT.mjJNT_FREE:
            out += [(js.velocities[0], np.arange(js.dofadr, js.dofadr + 3)),
                    (js.velocities[1], np.arange(js.dofadr + 3, js.dofadr + 6))]
        else:
            out.append((js.velocities[0], np.arange(js.dofadr, js.dofadr + js.nv)))
    return out


def _check_open(scene, what: str):
    if scene.registry.finalized:
        raise StateError(f"{what}: the scene's layout is already finalized (scene.layout was used); "
                         "declare noise before the first use of the layout")


def _sigmas(value, n: int, what: str) -> np.ndarray:
    try:
        s = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise StateError(f"{what} must be a number or {n} numbers, got {value!r}") from None
    if s.shape not in ((), (n,)):
        raise StateError(f"{what} must be a scalar or have shape ({n},), got shape {s.shape}")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise StateError(f"{what} must be finite and non-negative, got {s.tolist()}")
    return np.broadcast_to(s, (n,)).copy()


def _register(scene, tree: int, kind: str, name: str, component: int, sigma: float) -> NoiseSource:
    """One local source on every velocity state of kinematic tree ``tree``, all shared."""
    model, reg = scene.model, scene.registry
    states = [s for s, dofs in velocity_blocks(scene) if model.dof_treeid[dofs[0]] == tree]
    eps = tuple((s, reg.add_noise(s, 1)[0]) for s in states)
    reg.share_noise(eps)
    return NoiseSource(kind, name, component, float(sigma), eps)


def add_joint_noise(scene, joint: str, sigma) -> tuple[NoiseSource, ...]:
    """Generalized-force noise σ dW on each dof of ``joint`` (see module docstring)."""
    _check_open(scene, f"add_joint_noise({joint!r})")
    js = next((j for j in scene.joints if j.name == joint), None)
    if js is None:
        raise KeyError(f"add_joint_noise: no joint named {joint!r}; joints: "
                       f"{', '.join(j.name for j in scene.joints)}")
    sig = _sigmas(sigma, js.nv, f"add_joint_noise({joint!r}): sigma")
    new = [_register(scene, int(scene.model.dof_treeid[js.dofadr + k]), "joint", joint, k, sig[k])
           for k in range(js.nv)]
    scene_noise(scene).sources.extend(new)
    return tuple(new)


def add_body_noise(scene, body: str, force_sigma=0.0, torque_sigma=0.0) -> tuple[NoiseSource, ...]:
    """Wrench noise on ``body``: world-axis force at its centre of mass and world-axis torque."""
    _check_open(scene, f"add_body_noise({body!r})")
    model = scene.model
    b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body) if isinstance(body, str) else -1
    if b < 0:
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) or f"body{i}" for i in range(model.nbody)]
        raise KeyError(f"add_body_noise: no body named {body!r}; bodies: {', '.join(names)}")
    if model.body_weldid[b] == 0:
        raise StateError(f"add_body_noise: body {body!r} is welded to the world; no degree of freedom "
                         "feels a wrench on it")
    sig = np.concatenate([_sigmas(force_sigma, 3, f"add_body_noise({body!r}): force_sigma"),
                          _sigmas(torque_sigma, 3, f"add_body_noise({body!r}): torque_sigma")])
    tree = int(model.body_treeid[b])
    new = [_register(scene, tree, "body", body, c, sig[c]) for c in range(6)]
    scene_noise(scene).sources.extend(new)
    return tuple(new)


def check_extra_diffusion(name: str, spec: StateSpec, diffusion_fn) -> None:
    """Validate an extra state's diffusion declaration before anything is registered."""
    if diffusion_fn is None:
        if spec.noise_count:
            raise StateError(f"state {name!r} declares noise_count={spec.noise_count} but no diffusion_fn")
        return
    if not callable(diffusion_fn):
        raise StateError(f"state {name!r}: diffusion_fn must be callable")
    if not spec.noise_count:
        raise StateError(f"state {name!r} has a diffusion_fn but noise_count=0 in its StateSpec")


def register_extra_diffusion(scene, name: str, diffusion_fn) -> None:
    if diffusion_fn is not None:
        scene_noise(scene).extras[name] = diffusion_fn


def time_dependent(scene) -> bool:
    """Whether the diffusion may depend on t (only extra states' diffusion_fn can)."""
    return bool(scene_noise(scene).extras)


def _index(scene, layout):
    """Packed positions, dofs and source columns of the MuJoCo sources; coverage check."""
    blocks = dict(velocity_blocks(scene))
    noise = scene_noise(scene)
    pos, dof, col = [], [], []
    for i, src in enumerate(noise.sources):
        for state, local in src.endpoints:
            o = layout[state].diffusion_offsets[local]
            d = blocks[state]
            pos.append(np.arange(o, o + d.size))
            dof.append(d)
            col.append(np.full(d.size, i))
    covered = {(s, j) for src in noise.sources for s, j in src.endpoints}
    covered |= {(n, j) for n in noise.extras for j in range(layout[n].spec.noise_count)}
    missing = [(ep.state, ep.local) for ep in layout.endpoints if (ep.state, ep.local) not in covered]
    if missing:
        raise StateError(f"noise endpoints {missing} have no noise model filling their diffusion "
                         "(use add_joint_noise / add_body_noise / add_state(diffusion_fn=...))")
    cat = lambda parts: np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    return cat(pos), cat(dof), cat(col)


def joint_forces(scene) -> np.ndarray | None:
    """(sources, nv) generalized force per unit dW of every source (joint sources only: a constant), or
    None without noise sources. Backends without MJX data evaluate the diffusion from these."""
    noise = scene_noise(scene)
    if not noise.sources:
        return None
    bad = [s.name for s in noise.sources if s.kind != "joint"]
    if bad:
        scene.backend_impl.require("body_noise", f"add_body_noise({bad[0]!r})")
    f = np.zeros((len(noise.sources), scene.model.nv))
    for i, src in enumerate(noise.sources):
        js = next(j for j in scene.joints if j.name == src.name)
        f[i, js.dofadr + src.component] = src.sigma
    return f


def diffusion_from_data(scene, t, x, d):
    """Packed diffusion buffer from forward-evaluated MJX data ``d`` (one world), or from the host data of
    backend='mujoco' (``HostData.minv_f``: M(q)^-1 of the sources' forces, solved by MuJoCo C)."""
    layout = scene.layout
    noise = scene_noise(scene)
    g = jnp.zeros(layout.diffusion_size, dtype=d.qvel.dtype)
    pos, dof, col = _index(scene, layout)
    if noise.sources and isinstance(d, HostData):
        g = g.at[pos].set(d.minv_f[dof, col])
    elif noise.sources:
        from mjharness.scenes.settings import mjx

        from .backends.mjx_private import solve_m  # MJX's own M solve (mjx.jac: its body Jacobian)

        m = scene.mjx_model
        nv = scene.model.nv
        jacs = {}
        cols = []
        for src in noise.sources:
            if src.kind == "joint":
                js = next(j for j in scene.joints if j.name == src.name)
                cols.append(jnp.zeros(nv, g.dtype).at[js.dofadr + src.component].set(src.sigma))
                continue
            if src.name not in jacs:
                b = mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_BODY, src.name)
                jacs[src.name] = mjx.jac(m, d, d.xipos[b], b)  # (nv, 3) each
            jacp, jacr = jacs[src.name]
            c = src.component
            cols.append(src.sigma * (jacp[:, c] if c < 3 else jacr[:, c - 3]))
        force = jnp.stack(cols, axis=1)  # (nv, sources): generalized forces per unit dW
        minv_f = jax.vmap(lambda f: solve_m(m, d, f), in_axes=1, out_axes=1)(force)
        g = g.at[pos].set(minv_f[dof, col])
    for name, fn in noise.extras.items():
        r = layout[name]
        value = x[r.value_slice].reshape(r.spec.shape)
        out = jnp.asarray(fn(t, value, d))
        want = (r.spec.noise_count,) + r.spec.diffusion_shape
        if out.shape != want and not (r.spec.noise_count == 1 and out.shape == r.spec.diffusion_shape):
            raise StateError(f"diffusion_fn of state {name!r} must return shape {want} "
                             f"(noise_count, *diffusion_shape), got {out.shape}")
        ts = r.spec.tangent_size
        idx = np.concatenate([np.arange(o, o + ts) for o in r.diffusion_offsets])
        g = g.at[idx].set(out.reshape(-1).astype(g.dtype))
    return g


def diffusion(scene, t, x, ctrl=None):
    _index(scene, scene.layout)  # refuse uncovered endpoints before any MJX work
    d = scene.backend_impl.noise_data(scene, t, x, ctrl, None)
    return diffusion_from_data(scene, t, x, d)


def drift_diffusion(scene, t, x, ctrl=None, *, carry=None):
    """(derivative buffer, packed diffusion) from one ``mjx.forward``; with a carry also its proposal."""
    _index(scene, scene.layout)
    d = scene.backend_impl.noise_data(scene, t, x, ctrl, carry)
    out = (scene._derivative(t, x, d, d.qacc), diffusion_from_data(scene, t, x, d))
    return scene._with_carry(out, d, carry)
