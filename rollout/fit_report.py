"""A fit's report (``fit(..., report=DIR)``, ``mjharness fit --report DIR``): what a reader needs to judge it.

DIR/fit.h5     the result and how it was obtained, in one HDF5 group ``/fit``: the data file and its content hash,
               the parameters, bounds, start, noise, target and integrator; estimates, standard errors, 95 %
               intervals, correlation, the unidentifiable flags, the iterations' cost; enough to run it again
DIR/fit.json   ``FitResult.to_dict()``
DIR/summary.txt  the parameter table (as the CLI prints it)
DIR/parameters.png  each estimate with its 95 % interval, relative to its starting value
DIR/residuals.png   the weighted residuals' histogram against the standard normal (the noise model's check)
                    and their rms per component
DIR/prediction.png  fitted against recorded over time, world 0, the components with the largest residuals
DIR/index.html  the above on one page
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

import numpy as np

from .fit_stats import FIT_P

PLOTTED = 4  # components in the prediction plot


def fmt(v) -> str:
    """A value or an array, 6 significant digits (``[a,b,c]`` for several)."""
    vals = np.ravel(np.asarray(v, np.float64)).tolist()
    s = ",".join(f"{x:.6g}" for x in vals)
    return s if len(vals) == 1 else f"[{s}]"


def summary_lines(res) -> list[str]:
    """The parameter table and the fit's statistics, one line each (the CLI prints these)."""
    lines = [f"{'parameter':<28} {'estimate':>14} {'std error':>12}  95 % interval"]
    for p in res.params:
        lo, hi = res.ci95[p]
        flag = "  unidentifiable" if any(e == p or e.startswith(p + "[") for e in res.unidentifiable) else ""
        lines.append(f"{p:<28} {fmt(res.values[p]):>14} {fmt(res.stderr[p]):>12}  [{fmt(lo)}, {fmt(hi)}]{flag}")
    r = res.residuals
    how = f" (Jacobian: {res.jacobian})" if res.jacobian else ""
    lines.append(f"cost {res.cost:.4e} after {res.iterations} iterations{how}; condition number "
                 f"{res.condition_number:.3g}; residual rms {r['rms']:.3g}, reduced chi2 {r['reduced_chi2']:.3g} "
                 f"({r['dof']} dof)" + ("" if r.get("chi2_p") is None else f", chi2 test p = {r['chi2_p']:.2g}"))
    if r.get("chi2_p") is not None and r["chi2_p"] < FIT_P:
        lines.append(f"the fit does not explain the data (p < {FIT_P:g}): a local minimum, or a wrong model or noise "
                     "level; the intervals describe that minimum")
    return lines


def write_hdf5(path: str, res, inputs: dict[str, Any]) -> None:
    """``/fit`` of a new HDF5 file: ``inputs`` (how the fit was run: strings and numbers as such, lists, dicts and
    None as JSON) as attributes, the
    result as datasets (per flat parameter ``elements``: value, stderr, ci95_lo, ci95_hi, unidentifiable)."""
    import h5py

    flat: dict[str, list[float]] = {k: [] for k in ("value", "stderr", "lo", "hi")}
    for p in res.params:
        lo, hi = res.ci95[p]
        for key, v in (("value", res.values[p]), ("stderr", res.stderr[p]), ("lo", lo), ("hi", hi)):
            flat[key].extend(np.ravel(np.asarray(v, np.float64)).tolist())
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        g = f.create_group("fit")
        for k, v in inputs.items():
            g.attrs[k] = v if isinstance(v, (str, int, float, np.number)) else json.dumps(v)  # containers: JSON
        g.attrs["cost"], g.attrs["iterations"] = res.cost, res.iterations
        g.attrs["condition_number"] = res.condition_number
        g.attrs["residuals"] = json.dumps(res.residuals)
        g["elements"] = np.array(res.elements, dtype=h5py.string_dtype())
        g["value"], g["stderr"] = np.asarray(flat["value"]), np.asarray(flat["stderr"])
        g["ci95_lo"], g["ci95_hi"] = np.asarray(flat["lo"]), np.asarray(flat["hi"])
        g["unidentifiable"] = np.isin(np.array(res.elements), res.unidentifiable)
        g["correlation"] = np.asarray(res.correlation, np.float64)
        g["history_cost"] = np.asarray([h["cost"] for h in res.history], np.float64)


def _plots(folder: str, res, start: dict, time: np.ndarray, recorded: np.ndarray, predicted: np.ndarray,
           weight: np.ndarray, labels: list[str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import stats

    names = []
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.5 * len(res.params)))
    for i, p in enumerate(res.params):
        s = np.ravel(np.asarray(start[p], np.float64)).mean()
        v = np.ravel(np.asarray(res.values[p], np.float64)).mean()
        lo, hi = (np.ravel(np.asarray(b, np.float64)).mean() for b in res.ci95[p])
        ref = s if s else 1.0
        ax.errorbar([v / ref], [i], xerr=[[max(v - lo, 0) / abs(ref)], [max(hi - v, 0) / abs(ref)]], fmt="o")
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_yticks(range(len(res.params)), res.params)
    ax.set_xlabel("estimate / start (bars: 95 % interval; unidentifiable: none drawn)")
    names.append(_save(fig, folder, "parameters.png"))
    r = ((predicted - recorded) / weight).reshape(-1, recorded.shape[-1])
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    z = r.ravel() / max(np.sqrt(res.residuals["sigma2"]), 1e-300)
    a.hist(z, bins=60, density=True, alpha=0.7)
    g = np.linspace(-4, 4, 200)
    a.plot(g, stats.norm.pdf(g), "k-", lw=1)
    a.set_xlabel("residual / sigma")
    b.bar(range(r.shape[1]), np.sqrt(np.mean(r**2, axis=0)))
    b.set_xlabel("component")
    b.set_ylabel("rms weighted residual")
    names.append(_save(fig, folder, "residuals.png"))
    worst = np.argsort(-np.sqrt(np.mean(r**2, axis=0)))[:PLOTTED]
    fig, axes = plt.subplots(len(worst), 1, figsize=(8, 1.8 * len(worst)), squeeze=False)
    for ax_, c in zip(axes[:, 0], worst):
        ax_.plot(time, recorded[:, 0, c], ".", ms=3, label="recorded")
        ax_.plot(time, predicted[:, 0, c], "-", lw=1, label="fitted")
        ax_.set_ylabel(labels[c] if c < len(labels) else str(c), fontsize=8)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("time [s] (world 0)")
    names.append(_save(fig, folder, "prediction.png"))
    return names


def _save(fig, folder: str, name: str) -> str:
    fig.tight_layout()
    fig.savefig(os.path.join(folder, name), dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return name


def write_report(folder: str, res, inputs: dict[str, Any], start: dict, time: np.ndarray, recorded: np.ndarray,
                 predicted: np.ndarray, weight: np.ndarray, labels: list[str]) -> str:
    """Write the report (module docstring) into ``folder`` (made if missing); returns its index.html."""
    os.makedirs(folder, exist_ok=True)
    write_hdf5(os.path.join(folder, "fit.h5"), res, inputs)
    with open(os.path.join(folder, "fit.json"), "w") as f:
        json.dump(res.to_dict(), f, indent=1)
    lines = summary_lines(res)
    with open(os.path.join(folder, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    pngs = _plots(folder, res, start, time, recorded, predicted, weight, labels)
    page = ["<!doctype html><meta charset='utf-8'><title>mjharness fit</title>",
            f"<h1>fit of {html.escape(str(inputs.get('file', '')))}</h1>",
            "<pre>" + html.escape("\n".join(lines)) + "</pre>"]
    page += [f"<p><img src='{p}' alt='{p}'></p>" for p in pngs]
    index = os.path.join(folder, "index.html")
    with open(index, "w") as f:
        f.write("\n".join(page) + "\n")
    return index
