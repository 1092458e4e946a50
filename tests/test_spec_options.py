"""The run spec's table (rollout/engine/spec.py) is the one source of every run option: its copies of allowed
values agree with the modules that use them, ``rollout()``'s signature and docstring, the CLI's flags and the
file's attributes come from it."""

from __future__ import annotations

import inspect

from mjharness.adapters import mjscene, outputs
from mjharness.adapters.backends import BACKEND_NAMES
from mjharness.rollout import rollout
from mjharness.rollout.engine import spec
from mjharness.scenes import compat


def test_the_specs_allowed_values_are_the_using_modules():
    assert spec.BACKEND_NAMES == BACKEND_NAMES and spec.AUTO == BACKEND_NAMES[0]
    assert spec.MJX_MODES == tuple(compat.MODES)
    assert spec.CONTACT_MODES == tuple(compat.CONTACT_MODES)
    assert spec.QUATERNION_UPDATES == tuple(mjscene.QUATERNION_UPDATES)
    assert spec.SEMANTICS == tuple(outputs.SEMANTICS)


def test_rollout_signature_and_doc_are_the_table():
    sig = inspect.signature(rollout)
    names = list(sig.parameters)
    assert names[:2] == ["scene", "integrator"] and names[2:] == list(spec.OPTIONS)
    for name in spec.OPTIONS:
        p = sig.parameters[name]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY
        assert name == "steps" and p.default is inspect.Parameter.empty or p.default == spec.DEFAULTS[name], name
        assert spec.option_line(name) in rollout.__doc__, name


def test_every_default_passes_its_own_check():
    for name, o in spec.OPTIONS.items():
        if name != "steps":
            o.kind.check(name, spec.DEFAULTS[name])


def test_the_option_reference_is_generated_from_the_table():
    import pathlib
    import sys

    scripts = pathlib.Path(__file__).resolve().parents[1] / "scripts"
    sys.path.insert(0, str(scripts))
    try:
        import options_doc
    finally:
        sys.path.remove(str(scripts))
    assert options_doc.PAGE.read_text() == options_doc.page(), "docs/options.md is stale: python scripts/options_doc.py"
    for name in spec.OPTIONS:
        assert f"| `{name}` |" in options_doc.page()
