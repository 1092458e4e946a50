"""Per-world force provider parameters (``MjScene.add_force(fn, name, params={...})``): explicit values and draws.

A provider's parameters are per-world fields named ``"force:<provider>.<param>"`` beside the model fields: given
explicitly in ``model_params`` ((B, *shape) rows) or drawn by ``randomize`` with the key syntax and distributions of
model fields (``engine.randomize``): ``"force:drag.CD"`` draws every element, ``"force:drag.wind[1]"`` one component
of an array parameter; ``*`` scales the world's value (the explicit one where given, else the nominal), ``+`` adds to
it. World w draws KEY from ``numpy.random.default_rng([seed, w, crc32(KEY)])`` (``randomize.draw``), so the draws do
not depend on the backend, the batch size or the chunking. Unlike model fields, nothing is derived from them and no
physical rule applies (a provider's parameters mean what its function makes of them).
"""

from __future__ import annotations

import numpy as np

from ..errors import RolloutError
from .randomize import KEY_SYNTAX, Target, draw_worlds, parse_dist, refuse_overlaps

PREFIX = "force:"


def is_force_key(key) -> bool:
    """Whether a ``model_params`` / ``randomize`` key addresses a force provider parameter."""
    return isinstance(key, str) and key.strip().startswith(PREFIX)


def field_of_key(key: str) -> str:
    """The per-world field a key draws: ``"force:drag.wind[1]"`` -> ``"force:drag.wind"``."""
    return key.strip().partition("[")[0].strip()


def _nominal(scene, field: str, what: str) -> np.ndarray:
    from mjharness.adapters.forces import ForceError, force_param

    try:
        return np.asarray(force_param(scene, field, what), np.float64)
    except ForceError as e:
        raise RolloutError(str(e)) from None


def resolve_force_target(scene, key: str, text) -> Target:
    """A ``randomize`` entry on a force provider parameter, checked against the scene's providers."""
    match = KEY_SYNTAX.match(key)
    if match is None:
        raise RolloutError(f"randomize: key {key!r} is not 'force:<provider>.<param>' or that with '[i]' "
                           f"(e.g. 'force:drag.CD', 'force:drag.wind[1]')")
    dist = parse_dist(key, text)
    field, comp = match.groups()
    nominal = _nominal(scene, field, f"randomize[{key!r}]")
    sel = np.arange(nominal.size)
    if comp is not None:
        if int(comp) >= nominal.size:
            raise RolloutError(f"randomize[{key!r}]: component [{comp}] of a parameter of {nominal.size} value(s)")
        sel = sel[int(comp):int(comp) + 1]
    return Target(key, field, sel, dist)


def check_force_params(scene, params: dict, B: int) -> dict:
    """Explicit ``model_params`` entries of force provider parameters as {field: (B, *shape) float64}."""
    out = {}
    for name, v in params.items():
        shape = _nominal(scene, name, f"model_params[{name!r}]").shape
        try:
            a = np.asarray(v, np.float64)
        except (TypeError, ValueError):
            raise RolloutError(f"model_params[{name!r}] must be numbers, got {type(v).__name__}") from None
        if a.shape != (B,) + shape:
            raise RolloutError(f"model_params[{name!r}] must have shape {(B,) + shape} (batch {B} x the parameter's "
                               f"shape {shape}), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise RolloutError(f"model_params[{name!r}] holds non-finite values")
        out[name] = a
    return out


def draw_force_params(scene, randomize: dict, seed: int, worlds, explicit: dict) -> dict:
    """{field: (B, *shape)}: the explicit force parameters (``explicit``, checked) with the draws of the
    ``randomize`` entries on top, for the worlds ``worlds`` (global indices)."""
    worlds = np.asarray(worlds)
    targets = [resolve_force_target(scene, k, v) for k, v in randomize.items()]
    refuse_overlaps(targets)
    out = {k: np.array(v, np.float64) for k, v in explicit.items()}
    for t in targets:
        if t.field not in out:
            nominal = _nominal(scene, t.field, f"randomize[{t.key!r}]")
            out[t.field] = np.broadcast_to(nominal, (worlds.size,) + nominal.shape).copy()
        flat = out[t.field].reshape(worlds.size, -1)
        flat[:, t.flat] = t.dist.apply(flat[:, t.flat], draw_worlds(t, seed, worlds))
    return out
