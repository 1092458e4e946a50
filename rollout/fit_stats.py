"""What the data say about a least-squares fit: the Gauss-Newton covariance, intervals, identifiability.

At the optimum of min ½|r(θ)|², with r the weighted residuals and J = ∂r/∂θ, the parameter covariance is
Σ = σ² (JᵀJ)⁻¹, where σ² = 1 when the weights are the measurement noise (``noise`` given: r is in units of
standard deviations) and σ̂² = |r|² / (m − k) otherwise (the noise level estimated from the fit's own residuals;
the weights then only set the components' relative importance). Intervals are θ ± q σ_θ with q Student's t
quantile of m − k degrees of freedom (estimated σ) or the normal quantile (known noise).

With known noise |r|² is a χ² of m − k degrees of freedom where the model and the noise level are right and the
fit found the minimum near the truth: ``chi2_p`` is its upper tail P(χ² ≥ |r|²), the noise model's
goodness-of-fit test. A fit below ``FIT_P`` does not explain its data (``fit`` warns): a local minimum (through
contacts the cost is a staircase of smooth pieces), a wrong model, or too small a noise level; its intervals then
describe the minimum it stopped in, not where the truth is.

A direction of θ the data do not determine is a (near) null direction of J. Columns are first scaled to unit
norm (so parameters in different units compare); a parameter whose column is zero does not affect the data,
and a singular value below ``RCOND`` times the largest marks a combination that is determined no better than
rounding: every parameter with a weight of at least ``SHARE`` in such a direction is unidentifiable. Those get
an infinite standard error and interval; the covariance of the rest is computed without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RCOND = 1e-7  # singular values below this fraction of the largest: not determined by the data
SHARE = 0.1  # a parameter's squared weight in such a direction above which it is flagged
FIT_P = 0.01  # a known-noise fit whose chi-square is less likely than this is reported as not fitting its data


@dataclass(frozen=True)
class Uncertainty:
    """Per flat parameter: standard error, 95 % interval half width, flagged; the correlation matrix (NaN rows
    for flagged parameters), the condition number of the column-scaled Jacobian, the noise estimate."""

    stderr: np.ndarray
    half_width: np.ndarray
    unidentifiable: np.ndarray  # bool per parameter
    correlation: np.ndarray
    condition_number: float
    sigma2: float  # σ² used for Σ: 1 (known noise) or σ̂²
    dof: int  # m - k
    rms: float  # root mean square weighted residual
    reduced_chi2: float  # |r|² / (m - k): near 1 when the given noise model fits
    chi2_p: float  # known noise: P(χ²_{m-k} ≥ |r|²), the goodness-of-fit test; NaN with the noise estimated


def _flag(jac: np.ndarray) -> tuple[np.ndarray, float]:
    """(unidentifiable per column, condition number of the unit-column Jacobian)."""
    norms = np.linalg.norm(jac, axis=0)
    zero = norms <= np.finfo(float).tiny
    live = np.flatnonzero(~zero)
    flagged = zero.copy()
    if live.size == 0:
        return flagged, float("inf")
    _, s, vt = np.linalg.svd(jac[:, live] / norms[live], full_matrices=False)
    weak = s < RCOND * s[0]
    if weak.any():
        flagged[live] |= (vt[weak] ** 2).max(axis=0) >= SHARE
    cond = float("inf") if zero.any() or s[-1] == 0 else float(s[0] / s[-1])
    return flagged, cond


def chi2_p(rss: float, dof: int) -> float:
    """P(χ²_dof ≥ rss): the goodness-of-fit test of residuals in units of the known noise (NaN without dof)."""
    from scipy import stats

    return float(stats.chi2.sf(rss, dof)) if dof > 0 else float("nan")


def uncertainty(jac: np.ndarray, residual: np.ndarray, known_noise: bool) -> Uncertainty:
    """The fit's uncertainty from its Jacobian ``jac`` (m, k) and residuals ``residual`` (m,) at the optimum."""
    from scipy import stats

    m, k = jac.shape
    flagged, cond = _flag(jac)
    dof = m - k
    rss = float(residual @ residual)
    reduced = rss / dof if dof > 0 else float("nan")
    sigma2 = 1.0 if known_noise else reduced
    keep = np.flatnonzero(~flagged)
    cov = np.full((k, k), np.nan)
    if keep.size:
        jk = jac[:, keep]
        cov[np.ix_(keep, keep)] = sigma2 * np.linalg.pinv(jk.T @ jk, hermitian=True)
    var = np.diag(cov).copy()
    stderr = np.where(flagged, np.inf, np.sqrt(np.maximum(var, 0.0)))
    q = stats.norm.ppf(0.975) if known_noise or dof <= 0 else stats.t.ppf(0.975, dof)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov / np.sqrt(np.outer(var, var))
    return Uncertainty(stderr=stderr, half_width=q * stderr, unidentifiable=flagged, correlation=corr,
                       condition_number=cond, sigma2=float(sigma2), dof=int(dof), rms=float(np.sqrt(rss / m)),
                       reduced_chi2=float(reduced),
                       chi2_p=chi2_p(rss, dof) if known_noise else float("nan"))
