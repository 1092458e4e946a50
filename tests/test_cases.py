"""Check-case suite: the analytic solutions (adapters/analytic.py) against scipy's ODE solver, the
committed case files, and the cases themselves run through ``rollout`` with our integrators (short
horizons, two compiled chunk functions: the brick with RK4 for the asymmetric and Dzhanibekov cases,
the OU slider with SRA1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from mjharness.adapters import SpatialInertia
from mjharness.adapters import analytic as A
from mjharness.adapters.analytic import AnalyticError
from mjharness.integrators.rotations import quat_to_mat
from mjharness.rollout.cli import main as cli_main
from mjharness.rollout.verify import cases as C
from mjharness.rollout.verify.cases import CaseError
from mjharness.rollout.verify.recorded import abs_diff

TIGHT = dict(rtol=1e-12, atol=1e-13, method="DOP853")


def _rotated_inertia(moments, com=(0.0, 0.0, 0.0)):
    """(inertia, R): principal axes R rotated away from the body axes, so every frame change is exercised."""
    q = np.array([0.8, 0.3, -0.4, 0.33])
    R = np.asarray(quat_to_mat(q / np.linalg.norm(q)))
    return SpatialInertia(1.7, com, R @ np.diag(moments) @ R.T), R


def _euler_rhs(Ib, tau=None):
    tau = np.zeros(3) if tau is None else tau
    return lambda t, w: np.linalg.solve(Ib, tau - np.cross(w, Ib @ w))


def _full_rhs(I, g):
    """13-state free-body ODE (qpos, qvel as MuJoCo) with COM offset and gravity, for scipy."""
    Ib, c = np.asarray(I.inertia), np.asarray(I.com)

    def f(t, x):
        q, v, w = x[3:7], x[7:10], x[10:13]
        R = np.asarray(quat_to_mat(q))
        alpha = np.linalg.solve(Ib, -np.cross(w, Ib @ w))
        a = g - R @ (np.cross(alpha, c) + np.cross(w, np.cross(w, c)))
        qw, qv = q[0], q[1:]
        qdot = 0.5 * np.concatenate([[-qv @ w], qw * w + np.cross(qv, w)])
        return np.concatenate([v, qdot, a, alpha])

    return f


@pytest.mark.parametrize("w0", [[0.5, 1.0, 3.0], [3.0, 1.0, 0.5], [-0.4, 2.0, -0.3], [2.5, -1.5, 0.2]])
def test_jacobi_solution_matches_scipy_both_regimes(w0):
    I, _ = _rotated_inertia([0.3, 0.7, 1.1])
    t = np.linspace(0, 8, 401)
    sol = solve_ivp(_euler_rhs(np.asarray(I.inertia)), (0, 8), w0, t_eval=t, **TIGHT)
    assert np.max(np.abs(A.euler_jacobi(I, w0, t) - sol.y.T)) < 1e-9
    # The same solution from the principal moments alone (principal axes = body axes).
    sol = solve_ivp(_euler_rhs(np.diag([0.7, 1.1, 0.3])), (0, 8), w0, t_eval=t, **TIGHT)
    assert np.max(np.abs(A.euler_jacobi([0.7, 1.1, 0.3], w0, t) - sol.y.T)) < 1e-9


def test_flip_times_are_the_zeros_of_the_intermediate_rate():
    I, _ = _rotated_inertia([0.3, 0.7, 1.1])
    _, E = A.principal_frame(I)
    w0 = E @ np.array([0.05, 3.0, -0.02])  # near the intermediate axis
    flips = A.jacobi_flip_times(I, w0, 12.0)
    assert len(flips) >= 2
    sol = solve_ivp(_euler_rhs(np.asarray(I.inertia)), (0, 12.5), w0, dense_output=True, **TIGHT)
    w2 = lambda t: sol.sol(t) @ E[:, 1]  # noqa: E731
    for tf in flips:
        root = brentq(w2, tf - 0.05, tf + 0.05, xtol=1e-13)
        assert abs(root - tf) < 1e-8
    with pytest.raises(AnalyticError, match="separatrix"):
        A.jacobi_flip_times(I, E @ np.array([0.0, 3.0, 0.0]), 1.0)


def test_symmetric_free_body_with_offset_com_and_gravity_matches_scipy():
    I, _ = _rotated_inertia([0.4, 0.4, 0.9], com=(0.05, -0.02, 0.03))
    g = np.array([0.3, -0.2, -9.81])
    q0 = np.array([0.9, -0.2, 0.3, 0.1])
    x0 = np.concatenate([[0.1, 0.2, 1.0], q0 / np.linalg.norm(q0), [0.5, -0.3, 2.0], [1.0, -2.0, 3.5]])
    t = np.linspace(0, 5, 251)
    sol = solve_ivp(_full_rhs(I, g), (0, 5), x0, t_eval=t, **TIGHT)
    ref, got = sol.y.T, A.rigid_symmetric(I, x0, t, gravity=g)
    ref[:, 3:7] /= np.linalg.norm(ref[:, 3:7], axis=1, keepdims=True)
    assert np.max(np.abs(got[:, :3] - ref[:, :3])) < 1e-8
    assert np.max(abs_diff(got[:, 3:7], ref[:, 3:7], sign_free=True)) < 1e-9
    assert np.max(np.abs(got[:, 7:] - ref[:, 7:])) < 1e-9
    with pytest.raises(AnalyticError, match="not axisymmetric"):
        A.rigid_symmetric(_rotated_inertia([0.3, 0.4, 0.9])[0], x0, t)


def test_symmetric_torque_solution_matches_scipy():
    I, R = _rotated_inertia([0.4, 0.9, 0.4])  # symmetry axis: the second principal axis
    tau = R @ np.array([0.0, 0.25, 0.0])
    w0 = [1.0, -0.5, 2.0]
    t = np.linspace(0, 6, 301)
    sol = solve_ivp(_euler_rhs(np.asarray(I.inertia), tau), (0, 6), w0, t_eval=t, **TIGHT)
    assert np.max(np.abs(A.symmetric_torque_omega(I, w0, tau, t) - sol.y.T)) < 1e-9
    with pytest.raises(AnalyticError, match="not along the symmetry axis"):
        A.symmetric_torque_omega(I, w0, R @ np.array([0.1, 0.25, 0.0]), t)


def test_ou_moments_match_the_moment_equations():
    theta, sigma, v0, x0 = 1.7, 0.6, 1.3, -0.4

    def rhs(t, y):  # mean_v, mean_x, var_v, cov_xv, var_x
        mv, mx, vv, cxv, vx = y
        return [-theta * mv, mv, -2 * theta * vv + sigma ** 2, vv - theta * cxv, 2 * cxv]

    t = np.linspace(0, 4, 81)
    sol = solve_ivp(rhs, (0, 4), [v0, x0, 0, 0, 0], t_eval=t, **TIGHT)
    mv, vv, mx, vx = A.ou_moments(theta, sigma, v0, x0, t)
    for got, want in ((mv, sol.y[0]), (mx, sol.y[1]), (vv, sol.y[2]), (vx, sol.y[4])):
        assert np.max(np.abs(got - want)) < 1e-10


def test_methods_come_from_the_integrator_registry():
    from mjharness.integrators import INTEGRATORS

    fixed, stochastic = C.fixed_methods(), C.stochastic_methods()
    assert {"euler", "rk4", "rk38"} <= set(fixed) and {"euler_maruyama", "sra1"} <= set(stochastic)
    for name in fixed + stochastic:
        assert INTEGRATORS[name].kind == ("stochastic" if name in stochastic else "fixed")
    assert not set(fixed) & set(stochastic)
    assert "dormand_prince" not in fixed + stochastic  # adaptive: no fixed step to compare at
    case = C.load_case("ou_process")
    assert C.methods_for(case) == ["sra1"] and C.methods_for(case, all_integrators=True) == list(stochastic)


def test_case_files_are_complete_and_consistent():
    names = C.list_cases()
    assert len(names) == 8 and names[0] == "torque_free_symmetric" and names[-1] == "ou_process"
    features = set()
    for n in names:
        case = C.load_case(n)
        features.add(case["feature"])
        methods = C.methods_for(case, all_integrators=True)
        stochastic = case["integrator"] in C.stochastic_methods()
        # Every committed error belongs to a registered method of the case's kind (the explicit RK
        # family and the stochastic methods are all measured).
        assert case["integrator"] in methods and set(case["expected"]) <= set(methods), n
        assert set(case["expected"]) >= ({"euler_maruyama", "stochastic_heun", "sra1"} if stochastic else
                                         {"euler", "semi_implicit_euler", "heun", "midpoint", "rk4", "rk38"}), n
        for meth, errs in case["expected"].items():
            assert set(errs) == set(case["tolerance"]), (n, meth)
        # The documented integrator's committed error is within the tolerance (deterministic cases with
        # a margin of 2 at least; the OU case's errors are sampling errors of about 2-3 standard errors).
        margin = 1 if stochastic else 2
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
