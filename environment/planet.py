"""The planet's constants as data: an ellipsoid, a spin rate and a gravity field (WGS-84 by default).

Every function of ``mjharness.environment`` that needs a constant takes a ``Planet`` argument defaulting to
``WGS84``, so a case that specifies its own constants (NASA's NESC 2015 check cases, NASA/TM-2015-218675, give
theirs per case; a spherical non-rotating Earth is ``Planet(flattening=0.0, rotation_rate=0.0, j2=0.0)``) passes
them instead. The fields are plain floats: inside ``jax.jit`` they are compile-time constants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Planet:
    """A rotating oblate planet: reference ellipsoid, spin rate about +z and gravity (GM, J2), SI units.

    Defaults are WGS-84 as defined by NIMA TR8350.2 (3rd ed., amendment 1, 2000): a = 6378137.0 m,
    1/f = 298.257223563, ω = 7.292115e-5 rad/s, GM = 3.986004418e14 m³/s². J2 = 1.082629821313e-3 is
    −√5 C̄₂₀ with WGS-84's normalized coefficient C̄₂₀ = −0.484166774985e-3 of the same report (the value NASA's
    NESC check cases use: their published gravity fits it, data/nesc/README.md).
    """

    semi_major_axis: float = 6378137.0  # a [m]
    flattening: float = 1.0 / 298.257223563  # f = (a - b) / a
    rotation_rate: float = 7.292115e-5  # ω [rad/s], about the ECEF/ECI z axis
    gm: float = 3.986004418e14  # GM [m³/s²], atmosphere included
    j2: float = 1.082629821313e-3  # second zonal harmonic (unnormalized)
    name: str = "WGS-84"

    @property
    def semi_minor_axis(self) -> float:
        """b = a (1 - f) [m]."""
        return self.semi_major_axis * (1.0 - self.flattening)

    @property
    def eccentricity_squared(self) -> float:
        """First eccentricity squared e² = f (2 - f)."""
        return self.flattening * (2.0 - self.flattening)

    @property
    def second_eccentricity_squared(self) -> float:
        """Second eccentricity squared e'² = e² / (1 - e²)."""
        e2 = self.eccentricity_squared
        return e2 / (1.0 - e2)


WGS84 = Planet()
