"""Issue 45's acceptance protocol (scripts/fit_robot_check.py), reduced: gymnasium's reacher (a robot MJCF this
project does not bundle; no contacts), jointpos/jointvel sensors added, link masses, dampings and a joint's
frictionloss recorded under a fixed random control sequence, 2 % noise on the sensors, 20 noise seeds fitted on
MuJoCo C by finite differences from ±50 % starts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("gymnasium")


def _script():
    spec = importlib.util.spec_from_file_location("fit_robot_check", ROOT / "scripts" / "fit_robot_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fit_robot_check"] = mod  # (its dataclass looks its module up)
    spec.loader.exec_module(mod)
    return mod


def test_reacher_coverage_flag_and_both_starts(tmp_path):
    """Every identifiable parameter's truth inside its 95 % interval in at least 18 of 20 seeds (even seeds fitted
    from +50 %, odd from -50 %); the friction of link0 (which can collide with nothing) flagged unidentifiable with
    an infinite interval in every seed; seed 0 fitted from both starts ends at the same estimate (to 1e-3 of a
    standard error) with a reduced chi-square near 1."""
    S = _script()
    p = S.make_problem(str(Path(S.GYM_ASSETS) / "reacher.xml"), str(tmp_path), worlds=8, steps=60, record_every=2,
                       hold=10, noise_frac=0.02, ctrl_frac=0.1)
    assert p.invisible == "geom_friction:link0" and not p.extra["can_collide"]
    assert len(p.truth) == 5 and p.clean.shape == (30, 8, 4)
    hits = {k: 0 for k in p.truth}
    for seed in range(20):
        res = S.ours(p, S.noisy_file(p, seed, str(tmp_path)), 1.0 if seed % 2 == 0 else -1.0)
        assert res.jacobian == "differences (mujoco)" and res.iterations < 50
        assert res.unidentifiable == [p.invisible], res.unidentifiable  # (started as one value: all 3 share it)
        assert np.all(np.isinf(res.stderr[p.invisible])) and np.all(np.isinf(res.ci95[p.invisible][1]))
        for k, v in p.truth.items():
            hits[k] += res.ci95[k][0] < v < res.ci95[k][1]
        if seed == 0:
            first = res
    assert all(h >= 18 for h in hits.values()), hits
    other = S.ours(p, S.noisy_file(p, 0, str(tmp_path)), -1.0)
    for k in p.truth:
        assert abs(other.values[k] - first.values[k]) < 1e-3 * first.stderr[k], (k, other.values[k], first.values[k])
    assert abs(first.residuals["reduced_chi2"] - 1) < 0.15


def test_hopper_both_starts_reach_one_estimate_through_contacts(tmp_path):
    """gymnasium's hopper (the foot on the floor throughout: every rollout runs through contacts, whose cost is only
    piecewise smooth in the parameters): noise seeds 2 and 3, where fitting the whole horizon at once ended the
    -50 % start on another smooth piece than the +50 % start (0.3-1.3 standard errors away, at a higher cost),
    fitted from both starts through the growing horizon: one estimate (to 1e-3 of a standard error), the torso's
    friction flagged."""
    S = _script()
    p = S.make_problem(str(Path(S.GYM_ASSETS) / "hopper.xml"), str(tmp_path), worlds=8, steps=100, record_every=2,
                       hold=10, noise_frac=0.02, ctrl_frac=0.2)
    assert p.invisible == "geom_friction:torso_geom" and "floor" in [p.model.geom(g).name
                                                                    for g in p.extra["contact_geoms"]]
    for seed in (2, 3):
        path = S.noisy_file(p, seed, str(tmp_path))
        a, b = S.ours(p, path, 1.0), S.ours(p, path, -1.0)
        assert a.iterations < 50 and b.iterations < 50
        assert a.unidentifiable == [p.invisible] and b.unidentifiable == [p.invisible]
        for k in p.truth:
            assert abs(a.values[k] - b.values[k]) < 1e-3 * a.stderr[k], (seed, k, a.values[k], b.values[k])


def test_walker2d_fit_that_fails_the_chi2_test_is_grown_again_in_finer_steps(tmp_path, monkeypatch):
    """gymnasium's walker2d (two feet switching contacts), noise seed 6: the default growing horizon ends on a piece
    of the cost that fails the chi-square test (reduced chi-square 1.34, p ~ 1e-77); fit then grows the horizon
    again from the start in finer steps (``RETRY_HORIZONS``) and keeps that lower cost (no warning), where every
    truth lies within 2.5 standard errors of its estimate (8.8 before). The secant polish (``SECANT_SCALES``) then
    only lowers the cost further. (Over 20 seeds the polish raises coverage, scripts/fit_robot_check.py; on this
    seed it ends on a piece's edge where the friction loss's standard error is 4x smaller and the truth 3.7 of
    them away: one of the protocol's two misses of that parameter.)"""
    import warnings

    from mjharness.rollout import fit as fit_module

    S = _script()
    p = S.make_problem(str(Path(S.GYM_ASSETS) / "walker2d.xml"), str(tmp_path), worlds=8, steps=100, record_every=2,
                       hold=10, noise_frac=0.02, ctrl_frac=0.2)
    path = S.noisy_file(p, 6, str(tmp_path))
    polish = fit_module.SECANT_SCALES
    monkeypatch.setattr(fit_module, "SECANT_SCALES", ())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the fit that is kept passes the test: no warning
        retried = S.ours(p, path, 1.0)
    assert retried.residuals["chi2_p"] > 0.01 and abs(retried.residuals["reduced_chi2"] - 1) < 0.05
    for k, v in p.truth.items():
        assert abs(retried.values[k] - v) < 2.5 * retried.stderr[k], (k, retried.values[k], v, retried.stderr[k])
    monkeypatch.setattr(fit_module, "SECANT_SCALES", polish)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        res = S.ours(p, path, 1.0)
    assert res.cost < retried.cost and res.residuals["chi2_p"] > 0.01
    assert len(res.history) > res.iterations  # the polish's steps: history records, not solver iterations
    # without either, the same fit stops on the piece the test rejects, and says so
    monkeypatch.setattr(fit_module, "_misfit", lambda r, k: False)
    monkeypatch.setattr(fit_module, "SECANT_SCALES", ())
    with pytest.warns(UserWarning, match="larger than the given noise explains"):
        plain = S.ours(p, path, 1.0)
    assert plain.residuals["reduced_chi2"] > 1.2 and plain.cost > res.cost + 500
