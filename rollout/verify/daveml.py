"""Constant coefficients of a DAVE-ML aero model (AIAA S-119 ``DAVEfunc``), as the NESC 2015 models give them.

The NESC check cases' vehicles are DAVE-ML files (``NESC_data/All_models/*.dml`` in nasa/simupy-flight). The
brick's ``brick_aero.dml`` (bundled: ``data/nesc/brick_aero.dml``) defines its rate damping as constants
(``CLP_DAMPING`` ... per radian of p b/2V, q c̄/2V, r b/2V, with Cl = Clp pb/2V + Clr rb/2V, Cm = Cmq qc̄/2V,
Cn = Cnp pb/2V + Cnr rb/2V) and a floor on the airspeed it divides by (``VRW`` ``minValue``). ``daveml_variables``
reads every ``variableDef`` with ``xml.etree``; ``daveml_aero`` picks the constant-coefficient model the NESC
runner uses, in SI, and refuses a file that lacks one of its variables.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from .case_checks import CaseError

__all__ = ["daveml_variables", "daveml_aero", "DAVEML_IDS"]

_NS = "{http://daveml.org/2010/DAVEML}"
# our coefficient name -> the varID of the NESC models (brick_aero.dml; cannonball_aero.dml has only CD)
DAVEML_IDS = {"CD": "CD", "Clp": "CLP_DAMPING", "Clr": "CLR_DAMPING", "Cmq": "CMQ_DAMPING", "Cnp": "CNP_DAMPING",
              "Cnr": "CNR_DAMPING"}
_AIRSPEED_ID = "VRW"          # trueAirspeed input; its minValue floors the V in p b/2V
_TO_SI = {"ft_s": 0.3048, "m_s": 1.0}


def daveml_variables(path: str | Path) -> dict:
    """``{varID: {"name", "units", "value" (initialValue or None), "min" (minValue or None)}}`` of a DAVE-ML file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise CaseError(f"{path}: not a readable DAVE-ML file ({e})") from None
    out = {}
    for v in root.iter(f"{_NS}variableDef"):
        a = v.attrib
        num = {k: float(a[k]) if k in a else None for k in ("initialValue", "minValue")}
        out[a["varID"]] = dict(name=a.get("name", ""), units=a.get("units", ""), value=num["initialValue"],
                               min=num["minValue"])
    if not out:
        raise CaseError(f"{path}: no DAVE-ML variableDef (namespace {_NS[1:-1]})")
    return out


def daveml_aero(path: str | Path) -> dict:
    """``{"CD", "Clp", "Clr", "Cmq", "Cnp", "Cnr": float, "airspeed_min_m_s": float}`` from a DAVE-ML aero model.

    A coefficient the file does not define is 0 (the sphere's model has only CD); one defined without a constant
    value is refused (this reader evaluates no tables or MathML).
    """
    var = daveml_variables(path)
    out = {}
    for ours, vid in DAVEML_IDS.items():
        if vid not in var:
            out[ours] = 0.0
        elif var[vid]["value"] is None:
            raise CaseError(f"{path}: {vid} is not a constant (no initialValue); only constant coefficients are read")
        else:
            out[ours] = var[vid]["value"]
    vrw = var.get(_AIRSPEED_ID, {})
    if vrw.get("min") is not None:
        if vrw["units"] not in _TO_SI:
            raise CaseError(f"{path}: {_AIRSPEED_ID} units {vrw['units']!r}; known: {sorted(_TO_SI)}")
        out["airspeed_min_m_s"] = vrw["min"] * _TO_SI[vrw["units"]]
    else:
        out["airspeed_min_m_s"] = 0.0
    return out
