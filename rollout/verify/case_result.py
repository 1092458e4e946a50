"""``CaseResult``: one check case run with one method (``cases.run_case``, ``nesc.run_nesc``) and its verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class CaseResult:
    case: str
    integrator: str
    dt: float
    duration: float
    metrics: dict
    tolerance: dict
    expected: dict | None
    details: dict = field(default_factory=dict)
    seconds: float = 0.0
    gated: bool = True      # the case's documented integrator (pass/fail) or a documented extra method
    failed_worlds: list = field(default_factory=list)   # worlds whose rollout stopped (status != 0)

    @property
    def passed(self) -> bool:
        return not self.failed_worlds and all(math.isfinite(v) and v <= self.tolerance[k]
                                              for k, v in self.metrics.items())

    def to_dict(self) -> dict:
        return dict(case=self.case, integrator=self.integrator, dt=self.dt, duration=self.duration,
                    metrics=self.metrics, tolerance=self.tolerance, expected=self.expected, passed=self.passed,
                    gated=self.gated, failed_worlds=self.failed_worlds, details=self.details, seconds=self.seconds)
