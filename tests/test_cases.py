"""Check-case suite: the analytic solutions against scipy's ODE solver, the committed case files, and
the cases themselves run through our integrators (short horizons, two compiled programs: the brick with
RK4 for the asymmetric and Dzhanibekov cases, the OU slider with SRA1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from mjharness.rollout import cases as C
from mjharness.rollout.cases import CaseError, FreeBodyInertia
from mjharness.rollout.cli import main as cli_main

TIGHT = dict(rtol=1e-12, atol=1e-13, method="DOP853")


def _rotated_inertia(moments, com=(0.0, 0.0, 0.0), gravity=(0.0, 0.0, 0.0)):
    """Principal axes rotated away from the body axes, so every frame change is exercised."""
    q = np.array([0.8, 0.3, -0.4, 0.33])
    q /= np.linalg.norm(q)
    return FreeBodyInertia(1.7, np.array(com, float), np.array(moments, float), C._quat_to_mat(q),
                           np.array(gravity, float))


def _body_inertia(I):
    return I.axes @ np.diag(I.moments) @ I.axes.T


def _euler_rhs(Ib, tau=None):
    tau = np.zeros(3) if tau is None else tau
    return lambda t, w: np.linalg.solve(Ib, tau - np.cross(w, Ib @ w))


def _full_rhs(I):
    """13-state free-body ODE (qpos, qvel as MuJoCo) with COM offset and gravity, for scipy."""
    Ib, c, g = _body_inertia(I), I.com, I.gravity

    def f(t, x):
        q, v, w = x[3:7], x[7:10], x[10:13]
        R = C._quat_to_mat(q)
        alpha = np.linalg.solve(Ib, -np.cross(w, Ib @ w))
        a = g - R @ (np.cross(alpha, c) + np.cross(w, np.cross(w, c)))
        qw, qv = q[0], q[1:]
        qdot = 0.5 * np.concatenate([[-qv @ w], qw * w + np.cross(qv, w)])
        return np.concatenate([v, qdot, a, alpha])

    return f


@pytest.mark.parametrize("w0", [[0.5, 1.0, 3.0], [3.0, 1.0, 0.5], [-0.4, 2.0, -0.3], [2.5, -1.5, 0.2]])
def test_jacobi_solution_matches_scipy_both_regimes(w0):
    I = _rotated_inertia([0.3, 0.7, 1.1])
    t = np.linspace(0, 8, 401)
    sol = solve_ivp(_euler_rhs(_body_inertia(I)), (0, 8), w0, t_eval=t, **TIGHT)
    assert np.max(np.abs(C.euler_jacobi(I, w0, t) - sol.y.T)) < 1e-9


def test_flip_times_are_the_zeros_of_the_intermediate_rate():
    I = _rotated_inertia([0.3, 0.7, 1.1])
    _, E = C._sorted_frame(I)
    w0 = E @ np.array([0.05, 3.0, -0.02])  # near the intermediate axis
    flips = C.jacobi_flip_times(I, w0, 12.0)
    assert len(flips) >= 2
    sol = solve_ivp(_euler_rhs(_body_inertia(I)), (0, 12.5), w0, dense_output=True, **TIGHT)
    w2 = lambda t: sol.sol(t) @ E[:, 1]  # noqa: E731
    for tf in flips:
        root = brentq(w2, tf - 0.05, tf + 0.05, xtol=1e-13)
        assert abs(root - tf) < 1e-8
    with pytest.raises(CaseError, match="separatrix"):
        C.jacobi_flip_times(I, E @ np.array([0.0, 3.0, 0.0]), 1.0)


def test_symmetric_free_body_with_offset_com_and_gravity_matches_scipy():
    I = _rotated_inertia([0.4, 0.4, 0.9], com=(0.05, -0.02, 0.03), gravity=(0.3, -0.2, -9.81))
    q0 = np.array([0.9, -0.2, 0.3, 0.1])
    x0 = np.concatenate([[0.1, 0.2, 1.0], q0 / np.linalg.norm(q0), [0.5, -0.3, 2.0], [1.0, -2.0, 3.5]])
    t = np.linspace(0, 5, 251)
    sol = solve_ivp(_full_rhs(I), (0, 5), x0, t_eval=t, **TIGHT)
    ref, got = sol.y.T, C.rigid_symmetric(I, x0, t)
    ref[:, 3:7] /= np.linalg.norm(ref[:, 3:7], axis=1, keepdims=True)
    assert np.max(np.abs(got[:, :3] - ref[:, :3])) < 1e-8
    assert np.max(C._quat_err(got[:, 3:7], ref[:, 3:7])) < 1e-9
    assert np.max(np.abs(got[:, 7:] - ref[:, 7:])) < 1e-9
    with pytest.raises(CaseError, match="not axisymmetric"):
        C.rigid_symmetric(_rotated_inertia([0.3, 0.4, 0.9]), x0, t)


def test_symmetric_torque_solution_matches_scipy():
    I = _rotated_inertia([0.4, 0.9, 0.4])  # symmetry axis: the second principal axis
    tau = I.axes @ np.array([0.0, 0.25, 0.0])
    w0 = [1.0, -0.5, 2.0]
    t = np.linspace(0, 6, 301)
    sol = solve_ivp(_euler_rhs(_body_inertia(I), tau), (0, 6), w0, t_eval=t, **TIGHT)
    assert np.max(np.abs(C.symmetric_torque_omega(I, w0, tau, t) - sol.y.T)) < 1e-9
    with pytest.raises(CaseError, match="not along the symmetry axis"):
        C.symmetric_torque_omega(I, w0, I.axes @ np.array([0.1, 0.25, 0.0]), t)


def test_ou_moments_match_the_moment_equations():
    theta, sigma, v0, x0 = 1.7, 0.6, 1.3, -0.4

    def rhs(t, y):  # mean_v, mean_x, var_v, cov_xv, var_x
        mv, mx, vv, cxv, vx = y
        return [-theta * mv, mv, -2 * theta * vv + sigma ** 2, vv - theta * cxv, 2 * cxv]

    t = np.linspace(0, 4, 81)
    sol = solve_ivp(rhs, (0, 4), [v0, x0, 0, 0, 0], t_eval=t, **TIGHT)
    mv, vv, mx, vx = C.ou_moments(theta, sigma, v0, x0, t)
    for got, want in ((mv, sol.y[0]), (mx, sol.y[1]), (vv, sol.y[2]), (vx, sol.y[4])):
        assert np.max(np.abs(got - want)) < 1e-10


def test_case_files_are_complete_and_consistent():
    names = C.list_cases()
    assert len(names) == 8 and names[0] == "torque_free_symmetric" and names[-1] == "ou_process"
    features = set()
    for n in names:
        case = C.load_case(n)
        features.add(case["feature"])
        methods = C.STOCHASTIC_METHODS if case["integrator"] in C.STOCHASTIC_METHODS else C.FIXED_METHODS
        assert case["integrator"] in methods and set(case["expected"]) == set(methods), n
        for meth, errs in case["expected"].items():
            assert set(errs) == set(case["tolerance"]), (n, meth)
        # The documented integrator's committed error is within the tolerance (deterministic cases with
        # a margin of 2 at least; the OU case's errors are sampling errors of about 2-3 standard errors).
        margin = 1 if methods is C.STOCHASTIC_METHODS else 2
        for k, tol in case["tolerance"].items():
            assert case["expected"][case["integrator"]][k] <= tol / margin, (n, k)
    assert len(features) == 8  # each case adds its own feature
    with pytest.raises(CaseError, match="no case 'nope'"):
        C.load_case("nope")


@pytest.mark.parametrize("name", ["torque_free_asymmetric", "dzhanibekov"])
def test_free_body_cases_pass_with_rk4(name):
    case = C.load_case(name)
    r = C.run_case(case, duration=case["test_duration"])
    assert r.gated and r.passed, (r.metrics, r.tolerance)
    if name == "dzhanibekov":
        flips = r.details["flips"]
        assert all(len(f["analytic"]) == 1 == len(f["simulated"]) for f in flips)  # one flip each within 3 s
        assert r.metrics["flip_time"] < 1e-8


def test_ou_case_passes_with_sra1():
    case = C.load_case("ou_process")
    r = C.run_case(case, duration=case["test_duration"])
    assert r.integrator == "sra1" and r.passed, (r.metrics, r.tolerance)
    se = r.details["standard_error"]
    assert r.metrics["mean_v"] < 5 * se["mean_v"] and r.metrics["var_v"] < 5 * se["var_v"]


def test_cli_lists_and_runs_cases(capsys):
    assert cli_main(["cases", "--list"]) == 0
    out = capsys.readouterr().out
    assert "dzhanibekov" in out and "ou_process" in out
    # Same configuration as the test above: its compiled program is reused.
    assert cli_main(["cases", "dzhanibekov", "--duration", str(C.load_case("dzhanibekov")["test_duration"])]) == 0
    out = capsys.readouterr().out
    assert "flip_time" in out and "pass" in out and "1 passed, 0 failed" in out
    assert cli_main(["cases", "nope"]) == 2
    assert math.isfinite(1.0)
