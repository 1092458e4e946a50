"""MuJoCo's ``implicitfast`` velocity update on MJX data: the MJX-specific half of ``ImplicitFast``.

MuJoCo (``mj_implicitSkip``, integrator ``implicitfast``) replaces the forward acceleration by the
solution of

    (M - h D) qacc = qfrc_smooth + qfrc_constraint,

``D = d(qfrc_actuator + qfrc_passive)/d qvel`` without the RNE (Coriolis/centripetal) derivative, so
``M - h D`` is symmetric and gets a Cholesky-type factorization. MJX implements the core of it
(``derivative.deriv_smooth_vel``: affine actuator gains and biases, joint and tendon damping; the
dense factorization of ``forward.implicit``), which is used here as is. MuJoCo C 4.0 does four more
things that ``mjx.step`` does not, measured against ``mj_step`` and reproduced here:

1. actuators whose force is clamped (``forcerange``, or the ``actuatorfrcrange`` of their joint or
   tendon) contribute no derivative;
2. muscle gains contribute their velocity derivative (``mjd_muscleGain_vel``);
3. ``D`` is restricted to the sparsity pattern of ``M`` (C gathers ``qDeriv`` onto it), so damping or
   actuation coupling different kinematic trees (a tendon across two trees) drops out;
4. the 6x6 block of every free joint whose descendants are all welded to it ("free rigid subtree")
   is solved again with the derivative of its bias force (gyroscopic terms) added, as C's local LU
   solve does: ``(M - h (D - dqfrc_bias/dqvel)) qacc = qfrc`` on that block.

Not covered (``mjx.step`` has none of them either): fluid drag (MJX refuses it under implicitfast;
``unsupported`` says so) and actuators disabled by group (``opt.disableactuator``).

Everything here is a pure function of an MJX model (its static numpy structure plus its arrays) and
data after ``mjx.forward``; ``MjScene.implicit_dynamics`` calls it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.scenes.settings import mjx  # mujoco.mjx, imported on first use

from .backends import mjx_private as _private


def unsupported(mjx_model) -> str | None:
    """Why implicitfast cannot run on this model, or None."""
    if _private.has_fluid_params(mjx_model) and not (
            mjx_model.opt.disableflags & (mjx.DisableBit.DAMPER | mjx.DisableBit.SPRING)):
        return ("fluid drag (opt density, viscosity or wind) has no implicitfast derivative in MJX; set them to 0 "
                "or choose semi_implicit_euler or rk4")
    return None


# -- static structure (numpy, from the model) -----------------------------------------------------

def m_pattern(m) -> np.ndarray:
    """(nv, nv) 0/1 mask of the sparsity pattern of M (symmetric): where C keeps qDeriv."""
    mask = np.zeros((m.nv, m.nv))
    for i in range(m.nv):
        a = int(m.M_rowadr[i])
        mask[i, m.M_colind[a:a + int(m.M_rownnz[i])]] = 1.0
    return np.maximum(mask, mask.T)


def free_rigid_dofadr(m) -> tuple[int, ...]:
    """dof address of every free joint whose body has no jointed descendant (C's ``mj_isFreeBody``)."""
    parent = np.asarray(m.body_parentid)
    out = []
    for j in np.flatnonzero(np.asarray(m.jnt_type) == mjx.JointType.FREE):
        b = int(m.jnt_bodyid[j])
        sub = {b}
        for k in range(b + 1, len(parent)):  # a parent's id is below its children's
            if int(parent[k]) in sub:
                sub.add(k)
        if sum(int(db) in sub for db in np.asarray(m.dof_bodyid)) == 6:
            out.append(int(m.jnt_dofadr[j]))
    return tuple(out)


# -- pieces of D ------------------------------------------------------------------------------------

def _at_bound(value, lo, hi):
    # A force scaled onto its bound (tendon limits: f * lo / total) can land one ulp inside it.
    tol = 4 * jnp.finfo(value.dtype).eps * jnp.maximum(jnp.abs(lo), jnp.abs(hi))
    return (value <= lo + tol) | (value >= hi - tol)


def actuator_keep(m, d) -> jax.Array:
    """(nu,) 1.0 for actuators that contribute to D, 0.0 for those whose force is clamped (C 4.0)."""
    keep = jnp.ones((m.nu,), d.qvel.dtype)
    lim = np.flatnonzero(np.asarray(m.actuator_forcelimited))
    if lim.size:
        f, r = d.actuator_force[lim], m.actuator_forcerange[lim]
        keep = keep.at[lim].set(jnp.where((f <= r[:, 0]) | (f >= r[:, 1]), 0.0, 1.0))
    trn, trnid = np.asarray(m.actuator_trntype), np.asarray(m.actuator_trnid)[:, 0]
    for j in np.flatnonzero(np.asarray(m.jnt_actfrclimited)):
        acts = np.flatnonzero(np.isin(trn, (mjx.TrnType.JOINT, mjx.TrnType.JOINTINPARENT)) & (trnid == j))
        if acts.size:
            dofs = np.flatnonzero(np.asarray(m.dof_jntid) == j)
            lo, hi = m.jnt_actfrcrange[j, 0], m.jnt_actfrcrange[j, 1]
            sat = jnp.any((d.qfrc_actuator[dofs] <= lo) | (d.qfrc_actuator[dofs] >= hi))
            keep = keep.at[acts].multiply(jnp.where(sat, 0.0, 1.0))
    for k in np.flatnonzero(np.asarray(m.tendon_actfrclimited)):
        acts = np.flatnonzero((trn == mjx.TrnType.TENDON) & (trnid == k))
        if acts.size:
            total = jnp.sum(d.actuator_force[acts])
            sat = _at_bound(total, m.tendon_actfrcrange[k, 0], m.tendon_actfrcrange[k, 1])
            keep = keep.at[acts].multiply(jnp.where(sat, 0.0, 1.0))
    return keep


def _muscle_deriv(m, d, keep):
    """moment' diag(keep * dgain/dvel * act) moment for muscle gains (MJX's derivative omits them)."""
    ids = np.flatnonzero(np.asarray(m.actuator_gaintype) == mjx.GainType.MUSCLE)
    if not ids.size:
        return None
    dgain = jax.vmap(jax.grad(_private.muscle_gain, argnums=1))(
        d.actuator_length[ids], _private.impl_field(d, "actuator_velocity")[ids],
        jnp.asarray(m.actuator_lengthrange)[ids], jnp.asarray(m.actuator_acc0)[ids], m.actuator_gainprm[ids])
    # force = gain * (ctrl, or the last activation of a stateful actuator), as C's mjd_actuator_vel
    u = d.ctrl[ids]
    stateful = np.flatnonzero(np.asarray(m.actuator_dyntype)[ids] != mjx.DynType.NONE)
    if stateful.size:
        last = np.asarray(m.actuator_actadr)[ids] + np.asarray(m.actuator_actnum)[ids] - 1
        u = u.at[stateful].set(d.act[last[stateful]])
    mom = _private.impl_field(d, "actuator_moment")[ids]
    return mom.T @ ((keep[ids] * dgain * u)[:, None] * mom)


def smooth_vel_deriv(m, d) -> jax.Array:
    """C's implicitfast ``qDeriv`` (nv, nv), dense: MJX's derivative with C's actuator rules, on M's pattern."""
    keep = actuator_keep(m, d) if m.nu else None
    mk = m
    if keep is not None:  # clamped actuators: zero their velocity gain and bias for MJX's derivative
        mk = m.replace(actuator_gainprm=m.actuator_gainprm.at[:, 2].multiply(keep),
                       actuator_biasprm=m.actuator_biasprm.at[:, 2].multiply(keep))
    qderiv = mjx.deriv_smooth_vel(mk, d)
    qderiv = jnp.zeros((m.nv, m.nv), d.qvel.dtype) if qderiv is None else qderiv
    if keep is not None and not (m.opt.disableflags & mjx.DisableBit.ACTUATION):
        mus = _muscle_deriv(m, d, keep)
        if mus is not None:
            qderiv = qderiv + mus
    return qderiv * m_pattern(m)


# -- free rigid subtrees ------------------------------------------------------------------------------

def _free_bias(cdof, crb, qv):
    """Velocity part of qfrc_bias of a free rigid subtree (MJX's com_vel + rne on one 6-dof block)."""
    vt = cdof[:3].T @ qv[:3]  # translation first: the angular cdof_dot sees only it (as com_vel)
    v = vt + cdof[3:].T @ qv[3:]
    acc = jnp.einsum("ij,i->j", jax.vmap(_private.motion_cross, in_axes=(None, 0))(vt, cdof[3:]), qv[3:])
    f = _private.inert_mul(crb, acc) + _private.motion_cross_force(v, _private.inert_mul(crb, v))
    return cdof @ f


def free_blocks(m, d, h, M, qfrc, qderiv, qacc):
    """Re-solve the 6x6 block of every free rigid subtree with its bias derivative (C's local LU)."""
    adr = free_rigid_dofadr(m)
    if not adr:
        return qacc
    idx = np.asarray(adr)[:, None] + np.arange(6)  # (k, 6)
    body = np.asarray(m.dof_bodyid)[np.asarray(adr)]
    cdof, crb = d.cdof[idx], _private.impl_field(d, "crb")[body]
    B = jax.vmap(jax.jacfwd(_free_bias, argnums=2))(cdof, crb, d.qvel[idx])
    A = M[idx[:, :, None], idx[:, None, :]] - h * (qderiv[idx[:, :, None], idx[:, None, :]] - B)
    local = jnp.linalg.solve(A, qfrc[idx][..., None])[..., 0]
    # C keeps the global solution where the block cannot be factorized.
    ok = jnp.all(jnp.isfinite(local), axis=-1, keepdims=True)
    return qacc.at[idx].set(jnp.where(ok, local, qacc[idx]))


# -- the update -----------------------------------------------------------------------------------------

def implicitfast_qacc(m, d, h) -> jax.Array:
    """qacc of MuJoCo's implicitfast step of size ``h`` from data ``d`` after ``mjx.forward``."""
    h = jnp.asarray(h, d.qvel.dtype)
    qfrc = d.qfrc_smooth + d.qfrc_constraint
    qderiv = smooth_vel_deriv(m, d)
    adr = free_rigid_dofadr(m)
    glob = qderiv
    if adr:  # C solves the free blocks locally: the global factorization sees M alone there
        off = np.ones(m.nv)
        off[(np.asarray(adr)[:, None] + np.arange(6)).ravel()] = 0.0
        glob = qderiv * np.outer(off, off)
    # As mjx.forward.implicit: dense M (full_m also unpacks MJX's sparse storage), Cholesky.
    M = mjx.full_m(m, d)
    qacc = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(M - h * glob), qfrc)
    return free_blocks(m, d, h, M, qfrc, qderiv, qacc)


def act_rate(m, act_dot, h) -> jax.Array:
    """Activation derivative whose Euler step is mj_advance's: FILTEREXACT takes the exact filter step."""
    dyn = np.asarray(m.actuator_dyntype)
    exact = np.flatnonzero(dyn == mjx.DynType.FILTEREXACT)
    if not m.na or not exact.size:
        return act_dot
    adr = np.asarray(m.actuator_actadr)[exact] + np.asarray(m.actuator_actnum)[exact] - 1
    tau = jnp.maximum(m.actuator_dynprm[exact, 0], mujoco.mjMINVAL)
    h = jnp.asarray(h, act_dot.dtype)
    return act_dot.at[adr].multiply(tau * (1 - jnp.exp(-h / tau)) / h)
