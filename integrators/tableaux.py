"""Butcher tableaux as data.

A ``Tableau`` is an explicit Runge–Kutta method: strictly lower-triangular ``a`` (s x s), weights
``b`` (the propagated solution), nodes ``c``, its ``order``, and for embedded pairs the second
weights ``b_low`` with ``order_low`` (the error estimate is the difference of the two solutions).
Coefficients are written as exact fractions and stored as floats (tuples, so tableaux are hashable
and integrators holding them are valid ``jax.jit`` static arguments).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as F


@dataclass(frozen=True)
class Tableau:
    name: str
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    order: int
    b_low: tuple[float, ...] | None = None
    order_low: int | None = None

    def __post_init__(self):
        s = len(self.b)
        a = tuple(tuple(float(v) for v in row) + (0.0,) * (s - len(row)) for row in self.a)
        if len(a) != s or any(len(row) != s for row in a):
            raise ValueError(f"tableau {self.name!r}: a must be {s}x{s} (or its lower triangle), got {self.a!r}")
        if any(a[i][j] != 0.0 for i in range(s) for j in range(i, s)):
            raise ValueError(f"tableau {self.name!r}: a must be strictly lower triangular (explicit method)")
        if len(self.c) != s:
            raise ValueError(f"tableau {self.name!r}: c has {len(self.c)} entries, expected {s}")
        if (self.b_low is None) != (self.order_low is None):
            raise ValueError(f"tableau {self.name!r}: b_low and order_low go together")
        if self.b_low is not None and len(self.b_low) != s:
            raise ValueError(f"tableau {self.name!r}: b_low has {len(self.b_low)} entries, expected {s}")
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", tuple(float(v) for v in self.b))
        object.__setattr__(self, "c", tuple(float(v) for v in self.c))
        if self.b_low is not None:
            object.__setattr__(self, "b_low", tuple(float(v) for v in self.b_low))

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def embedded(self) -> bool:
        return self.b_low is not None

    def padded(self, stages: int) -> tuple:
        """(a, b, c) as nested tuples with zero-weight stages appended up to ``stages``.

        The padded method gives the same numbers (extra stages carry zero weight), so one compiled
        program over traced (a, b, c) arrays can run every method with at most ``stages`` stages.
        """
        s = self.stages
        if stages < s:
            raise ValueError(f"tableau {self.name!r} has {s} stages; cannot pad to {stages}")
        z = stages - s
        a = tuple(row + (0.0,) * z for row in self.a) + ((0.0,) * stages,) * z
        return a, self.b + (0.0,) * z, self.c + (0.0,) * z

    def to_dict(self) -> dict:
        """JSON-able description (HDF5 attrs, ``integrator.config()``)."""
        d = dict(name=self.name, order=self.order, stages=self.stages, a=[list(r) for r in self.a],
                 b=list(self.b), c=list(self.c))
        if self.b_low is not None:
            d.update(b_low=list(self.b_low), order_low=self.order_low)
        return d


def tableau_from_dict(d: dict) -> Tableau:
    """The tableau ``Tableau.to_dict`` describes (its derived ``stages`` left out)."""
    return make_tableau(d["name"], d["a"], d["b"], d["c"], d["order"], d.get("b_low"), d.get("order_low"))


def make_tableau(name, a, b, c, order, b_low=None, order_low=None) -> Tableau:
    return Tableau(name, tuple(tuple(row) for row in a), tuple(b), tuple(c), order,
                   None if b_low is None else tuple(b_low), order_low)


EULER = make_tableau("euler", [[]], [1], [0], 1)

# Explicit trapezoid (Heun's second-order method).
HEUN = make_tableau("heun", [[], [1]], [F(1, 2), F(1, 2)], [0, 1], 2)

MIDPOINT = make_tableau("midpoint", [[], [F(1, 2)]], [0, 1], [0, F(1, 2)], 2)

RK4 = make_tableau("rk4", [[], [F(1, 2)], [0, F(1, 2)], [0, 0, 1]],
         [F(1, 6), F(1, 3), F(1, 3), F(1, 6)], [0, F(1, 2), F(1, 2), 1], 4)

# Kutta's 3/8 rule.
RK38 = make_tableau("rk38", [[], [F(1, 3)], [F(-1, 3), 1], [1, -1, 1]],
          [F(1, 8), F(3, 8), F(3, 8), F(1, 8)], [0, F(1, 3), F(2, 3), 1], 4)

# Bogacki–Shampine 3(2), FSAL.
BOGACKI_SHAMPINE = make_tableau(
    "bogacki_shampine",
    [[], [F(1, 2)], [0, F(3, 4)], [F(2, 9), F(1, 3), F(4, 9)]],
    [F(2, 9), F(1, 3), F(4, 9), 0], [0, F(1, 2), F(3, 4), 1], 3,
    b_low=[F(7, 24), F(1, 4), F(1, 3), F(1, 8)], order_low=2)

# Runge–Kutta–Fehlberg 4(5); the fifth-order solution is propagated (local extrapolation).
RKF45 = make_tableau(
    "rkf45",
    [[], [F(1, 4)], [F(3, 32), F(9, 32)], [F(1932, 2197), F(-7200, 2197), F(7296, 2197)],
     [F(439, 216), -8, F(3680, 513), F(-845, 4104)],
     [F(-8, 27), 2, F(-3544, 2565), F(1859, 4104), F(-11, 40)]],
    [F(16, 135), 0, F(6656, 12825), F(28561, 56430), F(-9, 50), F(2, 55)],
    [0, F(1, 4), F(3, 8), F(12, 13), 1, F(1, 2)], 5,
    b_low=[F(25, 216), 0, F(1408, 2565), F(2197, 4104), F(-1, 5), 0], order_low=4)

# Dormand–Prince 5(4), FSAL.
DORMAND_PRINCE = make_tableau(
    "dormand_prince",
    [[], [F(1, 5)], [F(3, 40), F(9, 40)], [F(44, 45), F(-56, 15), F(32, 9)],
     [F(19372, 6561), F(-25360, 2187), F(64448, 6561), F(-212, 729)],
     [F(9017, 3168), F(-355, 33), F(46732, 5247), F(49, 176), F(-5103, 18656)],
     [F(35, 384), 0, F(500, 1113), F(125, 192), F(-2187, 6784), F(11, 84)]],
    [F(35, 384), 0, F(500, 1113), F(125, 192), F(-2187, 6784), F(11, 84), 0],
    [0, F(1, 5), F(3, 10), F(4, 5), F(8, 9), 1, 1], 5,
    b_low=[F(5179, 57600), 0, F(7571, 16695), F(393, 640), F(-92097, 339200), F(187, 2100), F(1, 40)],
    order_low=4)

TABLEAUX = {t.name: t for t in (EULER, HEUN, MIDPOINT, RK4, RK38, BOGACKI_SHAMPINE, RKF45, DORMAND_PRINCE)}
