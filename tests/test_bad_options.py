"""Every option of the run spec's table refuses wrong values (property-based): a wrong type, a value out of
range, a typo in an allowed value, a mapping for a sequence (and the reverse), a combination without effect.
Each is one ``RolloutError`` (a ``ValueError``; wrong types also a ``TypeError``) naming the option, raised by
``rollout()`` before anything is loaded or written, so an existing file stays as it was; on the command line
the same mistakes exit 2 naming the flag."""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mjharness.rollout import RolloutError, rollout
from mjharness.rollout.cli.app import main
from mjharness.rollout.engine import spec
from mjharness.rollout.engine.checks import (
    Bool,
    Choice,
    Compression,
    Devices,
    Dict,
    Float,
    Free,
    Int,
    Outputs,
    Path,
    Pattern,
)

CHECKED = [name for name, o in spec.OPTIONS.items() if not isinstance(o.kind, Free)]
TEXT = st.text(alphabet="abcxyz_-. ", min_size=1, max_size=6)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _not_integral(f: float) -> bool:
    return not (math.isfinite(f) and f.is_integer())


def bad_values(kind) -> st.SearchStrategy:
    """Wrong values for an option of ``kind``."""
    wrong_types = st.one_of(TEXT, st.lists(st.integers(), min_size=1, max_size=2), st.just(object()))
    if isinstance(kind, Bool):
        return st.one_of(TEXT, st.sampled_from(["no", "false", "False", "0"]), st.integers(), st.floats(),
                         st.just(None))
    if isinstance(kind, Int):
        out = [wrong_types, st.booleans(), st.floats().filter(_not_integral)]
        if kind.lo is not None:
            out.append(st.integers(max_value=kind.lo - 1))
        if kind.hi is not None:
            out.append(st.integers(min_value=kind.hi + 1))
        return st.one_of(*out)
    if isinstance(kind, Float):
        out = [wrong_types, st.booleans(), st.sampled_from([math.nan, math.inf, -math.inf])]
        if kind.lo is not None:
            lo = kind.lo
            out.append(st.floats(max_value=lo, allow_nan=False).filter(lambda f: f < lo or (kind.gt and f == lo)))
        return st.one_of(*out)
    if isinstance(kind, Choice):
        values = kind.values
        typos = st.sampled_from(values).flatmap(lambda v: st.sampled_from([v + "x", v.upper(), " " + v, v[:-1]]))
        return st.one_of(typos.filter(lambda t: t not in values), st.integers(), st.lists(st.sampled_from(values),
                                                                                           min_size=1, max_size=1))
    if isinstance(kind, Pattern):
        return st.one_of(st.text(max_size=6).filter(lambda t: re.fullmatch(kind.regex, t) is None), st.integers(),
                         st.booleans())
    if isinstance(kind, Outputs):
        return st.one_of(st.dictionaries(TEXT, st.dictionaries(TEXT, st.integers()), min_size=1, max_size=2),
                         st.integers(), st.floats(), st.lists(st.integers(), min_size=1, max_size=2))
    if isinstance(kind, Dict):
        out = [st.lists(TEXT, min_size=1, max_size=2), TEXT, st.integers(),
               st.dictionaries(st.integers(), TEXT, min_size=1, max_size=1)]
        if kind.str_values:
            out.append(st.dictionaries(TEXT, st.integers(), min_size=1, max_size=2))
        return st.one_of(*out)
    if isinstance(kind, Path):
        return st.one_of(st.integers(), st.lists(TEXT, min_size=1, max_size=2), st.just(""), st.booleans())
    if isinstance(kind, Compression):
        return st.one_of(TEXT.filter(lambda t: t not in ("gzip", "lzf")), st.integers(min_value=10),
                         st.integers(max_value=-1), st.booleans(), st.floats())
    if isinstance(kind, Devices):
        return st.one_of(st.integers(max_value=0), TEXT, st.dictionaries(TEXT, st.integers(), min_size=1,
                                                                           max_size=1), st.just([]), st.just(1.5))
    raise AssertionError(f"no bad values for {kind!r}: add them here")


@pytest.fixture(scope="module")
def existing(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "exists.h5"
    path.write_bytes(b"an existing file the user cares about\n" * 100)
    return path


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_checked_option_has_bad_values():
    for name in CHECKED:
        bad_values(spec.OPTIONS[name].kind)


@pytest.mark.parametrize("name", CHECKED)
@SETTINGS
@given(data=st.data())
def test_a_wrong_value_is_refused_naming_the_option_and_no_file_changes(name, data, existing):
    bad = data.draw(bad_values(spec.OPTIONS[name].kind), label=name)
    before = _digest(existing)
    kw = dict(steps=10, batch=2, out=str(existing), overwrite=True, progress=False)
    if name in ("out", "resume"):
        kw.pop("out"), kw.pop("overwrite")
    with pytest.raises(RolloutError) as e:
        rollout("box_on_plane", **{**kw, name: bad})
    assert name in str(e.value), str(e.value)
    assert isinstance(e.value, ValueError)
    assert _digest(existing) == before


@pytest.mark.parametrize("name", [n for n, o in spec.OPTIONS.items() if o.needs])
def test_a_combination_without_effect_names_both_options(name):
    o = spec.OPTIONS[name]
    for i, need in enumerate(o.needs):
        kind = o.kind
        value = {Bool: not spec.DEFAULTS[name]}.get(type(kind))
        if value is None and isinstance(kind, Choice):
            value = next(v for v in kind.values if v != spec.DEFAULTS[name] and need.when(v))
        if value is None and isinstance(kind, Pattern):
            value = "draw"
        if value is None and isinstance(kind, Compression):
            value = "gzip"
        if value is None and isinstance(kind, Outputs):
            value = ("energy",)
        assert value is not None, name
        # the option's earlier rules (checked first) satisfied, this one not
        ok = {"out": "unused.h5", "terminate": lambda t, x: False, "on_terminate": "reset", "outputs": ("energy",)}
        other = {"out": None, "terminate": None, "on_terminate": "freeze", "outputs": ()}[need.option]
        given = {n.option: ok[n.option] for n in o.needs[:i]} | {need.option: other}
        with pytest.raises(RolloutError) as e:
            spec.check_spec(spec.RunSpec.from_options(steps=10, **{name: value, **given}))
        assert name in str(e.value) and need.option in str(e.value), str(e.value)


def _bad_flag_texts(kind) -> st.SearchStrategy:
    if isinstance(kind, Int):
        out = [TEXT, st.floats().filter(_not_integral).map(repr)]
        if kind.lo is not None:
            out.append(st.integers(max_value=kind.lo - 1).map(str))
        return st.one_of(*out)
    if isinstance(kind, Float):
        out = [TEXT, st.sampled_from(["nan", "inf", "-inf"])]
        if kind.lo is not None:
            out.append(st.floats(max_value=kind.lo, allow_nan=False).filter(
                lambda f: f < kind.lo or (kind.gt and f == kind.lo)).map(repr))
        return st.one_of(*out)
    if isinstance(kind, Choice):
        return st.sampled_from([v for v in kind.values if isinstance(v, str)]).map(lambda v: v + "x")
    if isinstance(kind, Pattern):
        return st.text(alphabet="ABC:/", min_size=1, max_size=4).filter(lambda t: re.fullmatch(kind.regex, t) is None)
    if isinstance(kind, Compression):
        return TEXT.filter(lambda t: t not in ("gzip", "lzf", "none"))
    if isinstance(kind, Devices):
        return st.one_of(TEXT, st.integers(max_value=0).map(str))
    return st.nothing()


FLAGGED = [n for n in CHECKED if spec.OPTIONS[n].cli and not isinstance(spec.OPTIONS[n].kind, (Bool, Dict, Outputs))]


@pytest.mark.parametrize("name", FLAGGED)
@SETTINGS
@given(data=st.data())
def test_a_wrong_flag_value_exits_2_naming_the_flag_and_no_file_changes(name, data, existing):
    text = data.draw(_bad_flag_texts(spec.OPTIONS[name].kind), label=name)
    flag = spec.cli_flag(name)
    before = _digest(existing)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["run", "box_on_plane", "--steps", "10", "--out", str(existing), "--overwrite",
                         f"{flag}={text}"])
        except SystemExit as e:  # argparse's own refusal (a type or choice it checks)
            code = e.code
    assert code == 2 and flag in err.getvalue(), err.getvalue()
    assert _digest(existing) == before
