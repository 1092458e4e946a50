"""What a cross-check reports: per-field errors, invariant drifts, pass/fail; as text, JSON and a plot."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np


@dataclass
class FieldResult:
    """Max |recorded - reference| of one field: overall (world, time) and per world."""

    name: str
    size: int
    max_abs: float
    world: int
    time: float
    per_world_max: np.ndarray    # (B,)
    per_world_time: np.ndarray   # (B,)
    error_vs_time: np.ndarray    # (T,) max over worlds and components
    tol: float | None = None

    @property
    def passed(self) -> bool:
        return self.tol is None or (math.isfinite(self.max_abs) and self.max_abs <= self.tol)

    def to_dict(self) -> dict:
        return dict(name=self.name, size=self.size, max_abs=self.max_abs, world=self.world, time=self.time,
                    tol=self.tol, passed=self.passed, per_world_max=self.per_world_max.tolist(),
                    per_world_time=self.per_world_time.tolist())


@dataclass
class CrossCheckReport:
    """Outcome of ``crosscheck``; ``passed`` is False when a given tolerance is exceeded or a world failed."""

    path: str
    reference: str
    reference_info: dict
    time: np.ndarray
    fields: dict[str, FieldResult]
    energy: dict | None = None        # max_abs_drift, rel_drift, world, time, per_world, drift_vs_time
    momentum: dict | None = None      # same for |L(t) - L(0)|
    reference_energy: dict | None = None
    failed_worlds: list = field(default_factory=list)
    complete: bool = True
    notes: list = field(default_factory=list)
    energy_tol: float | None = None
    momentum_tol: float | None = None

    @property
    def passed(self) -> bool:
        ok = all(f.passed for f in self.fields.values()) and not self.failed_worlds
        if self.energy_tol is not None and self.energy is not None:
            ok &= self.energy["max_abs_drift"] <= self.energy_tol
        if self.momentum_tol is not None and self.momentum is not None:
            ok &= self.momentum["max_abs_drift"] <= self.momentum_tol
        return bool(ok)

    @property
    def max_abs(self) -> float:
        return max((f.max_abs for f in self.fields.values()), default=0.0)

    def to_dict(self) -> dict:
        def inv(d):
            return None if d is None else {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()
                                           if k != "drift_vs_time"}
        return dict(file=self.path, reference=self.reference, reference_info=self.reference_info,
                    passed=self.passed, complete=self.complete, samples=int(len(self.time)),
                    t_first=float(self.time[0]) if len(self.time) else None,
                    t_last=float(self.time[-1]) if len(self.time) else None, max_abs=self.max_abs,
                    fields={k: f.to_dict() for k, f in self.fields.items()}, energy=inv(self.energy),
                    momentum=inv(self.momentum), reference_energy=inv(self.reference_energy),
                    energy_tol=self.energy_tol, momentum_tol=self.momentum_tol, failed_worlds=self.failed_worlds,
                    notes=self.notes)

    def summary(self) -> str:
        lines = [f"{self.path}  vs  {self.reference}" + ("" if self.complete else "  (file INCOMPLETE)"),
                 f"  {len(self.time)} samples, t = {self.time[0]:g} .. {self.time[-1]:g} s" if len(self.time) else
                 "  no samples",
                 f"  {'field':28s} {'max |diff|':>11s} {'world':>6s} {'at t [s]':>10s} {'tol':>9s}  result"]
        for f in self.fields.values():
            tol_text = "-" if f.tol is None else f"{f.tol:.1e}"
            res = "" if f.tol is None else ("pass" if f.passed else "FAIL")
            lines.append(f"  {f.name:28s} {f.max_abs:11.3e} {f.world:6d} {f.time:10.4g} {tol_text:>9s}  {res}")
        for label, d, tol in (("energy drift", self.energy, self.energy_tol),
                              ("ang. momentum drift", self.momentum, self.momentum_tol)):
            if d is not None:
                res = "" if tol is None else ("pass" if d["max_abs_drift"] <= tol else "FAIL")
                tol_s = "-" if tol is None else f"{tol:.1e}"
                lines.append(f"  {label:28s} {d['max_abs_drift']:11.3e} {d['world']:6d} {d['time']:10.4g} "
                             f"{tol_s:>9s}  {res}   (relative {d['rel_drift']:.2e})")
        if self.reference_energy is not None:
            lines.append(f"  {'(reference energy drift)':28s} {self.reference_energy['max_abs_drift']:11.3e}")
        if self.failed_worlds:
            lines.append(f"  FAILED worlds (status != 0): {self.failed_worlds[:10]}"
                         + (" ..." if len(self.failed_worlds) > 10 else ""))
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append(f"  => {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)

    def write(self, prefix: str | os.PathLike[str], plot: bool = True) -> tuple[str, str | None]:
        """Write ``<prefix>.json`` and (``plot``) ``<prefix>.png`` (error vs time); returns both paths."""
        prefix = os.fspath(prefix)
        if prefix.endswith(".json"):
            prefix = prefix[:-5]
        js = prefix + ".json"
        with open(js, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1, default=_json_default)
        png = None
        if plot:
            png = prefix + ".png"
            self._plot(png)
        return js, png

    def _plot(self, png):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        inv = [(k, d) for k, d in (("energy drift |E(t) - E(0)|", self.energy),
                                    ("angular momentum drift |L(t) - L(0)|", self.momentum)) if d is not None]
        n = 1 + len(inv)
        fig, axes = plt.subplots(n, 1, figsize=(8, 3 * n), sharex=True, squeeze=False)
        ax = axes[0, 0]
        floor = 1e-18
        for f in self.fields.values():
            ax.semilogy(self.time, np.maximum(f.error_vs_time, floor), lw=0.9, label=f.name)
            if f.tol is not None:
                ax.axhline(f.tol, ls="--", lw=0.7, color="k")
        ax.set_ylabel("max over worlds |diff|")
        ax.set_title(f"{os.path.basename(self.path)} vs {self.reference}", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        for a, (label, d) in zip(axes[1:, 0], inv):
            a.semilogy(d["time_axis"], np.maximum(d["drift_vs_time"], floor), lw=0.9)
            a.set_ylabel(label, fontsize=8)
        axes[-1, 0].set_xlabel("time [s]")
        fig.tight_layout()
        fig.savefig(png, dpi=100)
        plt.close(fig)


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return str(o)
