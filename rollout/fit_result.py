"""A fit's result (``FitResult``) and its assembly from the solver's estimate and ``fit_stats.Uncertainty``; the
solver's per-iteration records (``iteration_reporter``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fit_stats import Uncertainty


@dataclass(frozen=True)
class FitResult:
    """A fit's estimates and what the data say about them (``fit_stats``).

    ``values``, ``stderr`` and ``ci95`` are keyed by parameter name: a float for a scalar parameter, an array
    for a vector one (and per world with ``start="file"``); ``ci95[name]`` is (lo, hi) with infinite ends for
    unidentifiable parameters. ``elements`` names the flat parameters (``name`` or ``name[i]``) that index
    ``correlation`` (NaN rows for flagged ones) and ``unidentifiable``. ``cost`` is ½|r|² of the weighted
    residuals at the estimate; ``history`` one record per solver iteration (cost, step and gradient norms,
    estimates); ``residuals`` the residual statistics (rms, degrees of freedom, sigma2, reduced chi², and with
    known noise ``chi2_p``, the goodness-of-fit test's p-value: ``fit_stats``)."""

    params: list[str]
    values: dict[str, Any]
    stderr: dict[str, Any]
    ci95: dict[str, tuple[Any, Any]]
    elements: list[str]
    correlation: np.ndarray
    unidentifiable: list[str]
    condition_number: float
    cost: float
    iterations: int
    history: list[dict] = dataclasses.field(repr=False)
    residuals: dict[str, float | None] = dataclasses.field(default_factory=dict)
    jacobian: str = ""   # how the Jacobian was computed: "exact (mjx)" or "differences (mujoco)"

    def to_dict(self) -> dict:
        """JSON-ready (non-finite numbers as None)."""
        def clean(v):
            a = np.asarray(v, np.float64)
            out = np.where(np.isfinite(a), a, np.nan).tolist()
            return _none_for_nan(out)

        return {"params": self.params, "values": {k: clean(v) for k, v in self.values.items()},
                "stderr": {k: clean(v) for k, v in self.stderr.items()},
                "ci95": {k: [clean(lo), clean(hi)] for k, (lo, hi) in self.ci95.items()},
                "elements": self.elements, "correlation": clean(self.correlation),
                "unidentifiable": self.unidentifiable, "condition_number": clean(self.condition_number),
                "cost": self.cost, "iterations": self.iterations, "residuals": self.residuals,
                "jacobian": self.jacobian,
                "history": self.history}


def _none_for_nan(v):
    if isinstance(v, list):
        return [_none_for_nan(x) for x in v]
    return None if v != v else v


def element_labels(params: Sequence[str], sizes: list[int]) -> list[str]:
    return [p if n == 1 else f"{p}[{i}]" for p, n in zip(params, sizes) for i in range(n)]


def estimates(z: np.ndarray, sizes, shapes, s0, per_element: bool) -> list[np.ndarray]:
    parts = np.split(np.asarray(z, np.float64).reshape(-1), np.cumsum(sizes)[:-1])
    return [np.asarray(s) * p.reshape(sh) if per_element else p.reshape(sh) for s, p, sh in zip(s0, parts, shapes)]


def iteration_reporter(params, sizes, shapes, s0, per_element, history, callback, progress, iterations):
    """The solver's per-iteration hook (``IterLog``): a history record, the callback, the progress bar; called
    with None once at the end to close the bar."""
    bar = None
    if progress and callback is None:  # a callback reports the iterations itself (the CLI prints them)
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations, unit="it", desc="fit", dynamic_ncols=True)

    def on(log) -> None:
        if log is None:
            if bar is not None:
                bar.close()
            return
        est = estimates(log.candidate, sizes, shapes, s0, per_element)
        rec = {"iteration": len(history) + 1, "cost": float(log.objective),
               "step": None if log.step is None else float(np.linalg.norm(log.step)),
               "gradient": None if log.grad is None else float(np.linalg.norm(log.grad)),
               "estimates": {p: e.tolist() for p, e in zip(params, est)}}
        history.append(rec)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"cost {rec['cost']:.3g}", refresh=False)
        if callback is not None:
            callback(rec)

    return on


def _shaped(v: np.ndarray, scalar: bool, per_world: bool) -> Any:
    if not scalar:
        return v
    return np.reshape(v, (-1,)) if per_world else float(np.reshape(v, -1)[0])


def assemble(params, labels, sizes, shapes, s0, per_element, z, u: Uncertainty, cost: float, n_iter: int,
            history: list[dict]) -> FitResult:
    est = estimates(z, sizes, shapes, s0, per_element)
    parts = np.cumsum([0] + sizes)
    values, stderr, ci95 = {}, {}, {}
    for p, e, s, a, b, sh in zip(params, est, s0, parts[:-1], parts[1:], shapes):
        unit = np.abs(np.asarray(s)) if per_element else 1.0  # a scale's error, in the value's units
        se = u.stderr[a:b].reshape(sh) * unit
        hw = u.half_width[a:b].reshape(sh) * unit
        one = b - a == 1  # a scalar parameter: a float, or with start="file" one value per world (B,)
        values[p], stderr[p] = _shaped(e, one, per_element), _shaped(se, one, per_element)
        ci95[p] = (_shaped(e - hw, one, per_element), _shaped(e + hw, one, per_element))
    residuals = {"rms": u.rms, "dof": u.dof, "sigma2": u.sigma2, "reduced_chi2": u.reduced_chi2,
                 "chi2_p": u.chi2_p if np.isfinite(u.chi2_p) else None}  # None: noise estimated, no test
    return FitResult(params=list(params), values=values, stderr=stderr, ci95=ci95, elements=labels,
                     correlation=u.correlation, unidentifiable=[lab for lab, f in zip(labels, u.unidentifiable) if f],
                     condition_number=u.condition_number, cost=cost, iterations=n_iter, history=history,
                     residuals=residuals)
