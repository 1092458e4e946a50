"""State registry and layout: offsets, runs, segments, views, reset, and every registration error."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjharness.integrators import StateError, StateLayout, StateRegistry, StateSpec

EUC = StateSpec((3,))
QUAT = StateSpec((4,), update="quaternion")
QUAT_HO = StateSpec((4,), update="quaternion_qdot")


def _layout(*specs):
    reg = StateRegistry()
    for name, spec in specs:
        reg.register(name, spec)
    return reg.finalize()


# -- specs ------------------------------------------------------------------------------------------

def test_spec_defaults_per_update_kind():
    assert EUC.deriv_shape == (3,) and EUC.diffusion_shape == (3,)
    assert QUAT.deriv_shape == (3,) and QUAT.diffusion_shape == (3,)
    assert QUAT_HO.deriv_shape == (4,) and QUAT_HO.diffusion_shape == (3,)
    assert StateSpec((2, 3)).size == 6 and StateSpec(5).shape == (5,)


@pytest.mark.parametrize("kwargs, match", [
    (dict(shape=(3,), update="quaternion"), r"quaternion state must have shape \(4,\)"),
    (dict(shape=(4, 1), update="quaternion_qdot"), r"must have shape \(4,\)"),
    (dict(shape=(4,), update="quaternion", deriv_shape=(4,)), r"deriv_shape \(4,\) does not fit"),
    (dict(shape=(4,), update="quaternion_qdot", deriv_shape=(3,)), r"deriv_shape \(3,\) does not fit"),
    (dict(shape=(3,), deriv_shape=(2,)), r"deriv_shape \(2,\) does not fit"),
    (dict(shape=(3,), diffusion_shape=(4,)), r"diffusion_shape \(4,\) does not fit"),
    (dict(shape=(4,), update="quaternion", diffusion_shape=(4,)), r"diffusion_shape"),
    (dict(shape=(-1,)), r"non-negative ints"),
    (dict(shape=(2.5,)), r"non-negative ints"),
    (dict(shape="ab"), r"non-negative ints"),
    (dict(shape=(3,), update="lie"), r"update must be one of"),
    (dict(shape=(3,), error_control="rms"), r"error_control must be one of"),
    (dict(shape=(3,), noise_count=-1), r"noise_count"),
])
def test_spec_errors(kwargs, match):
    with pytest.raises(StateError, match=match):
        StateSpec(**kwargs)


# -- registration ---------------------------------------------------------------------------------

def test_offsets_runs_and_registration_order():
    lay = _layout(("a", EUC), ("b", StateSpec((2, 2))), ("q", QUAT), ("c", StateSpec((1,))),
                  ("h", QUAT_HO), ("d", EUC))
    assert lay.names == ("a", "b", "q", "c", "h", "d")
    assert [(r.offset, r.size) for r in lay] == [(0, 3), (3, 4), (7, 4), (11, 1), (12, 4), (16, 3)]
    assert [(r.deriv_offset, r.deriv_size) for r in lay] == [(0, 3), (3, 4), (7, 3), (10, 1), (11, 4), (15, 3)]
    assert lay.size == 19 and lay.deriv_size == 18
    assert [(u.offset, u.size, u.deriv_offset, u.names) for u in lay.runs] == [
        (0, 7, 0, ("a", "b")), (11, 1, 10, ("c",)), (16, 3, 15, ("d",))]
    assert [r.name for r in lay.special] == ["q", "h"]


def test_registration_errors_change_nothing():
    reg = StateRegistry()
    reg.register("a", EUC)
    with pytest.raises(StateError, match="'a' is already registered"):
        reg.register("a", QUAT)
    with pytest.raises(StateError, match="non-empty string"):
        reg.register("", EUC)
    with pytest.raises(StateError, match="must be a StateSpec"):
        reg.register("b", (3,))
    assert reg.names == ("a",) and reg.spec("a") == EUC
    lay = reg.finalize()
    assert reg.finalize() is lay  # finalize twice is a no-op
    with pytest.raises(StateError, match="finalized"):
        reg.register("c", EUC)
    with pytest.raises(StateError, match="finalized"):
        reg.add_noise("a")
    assert reg.finalize().names == ("a",)


def test_layout_is_hashable_and_a_static_jit_argument():
    lay1 = _layout(("a", EUC), ("q", QUAT))
    lay2 = _layout(("a", EUC), ("q", QUAT))
    assert lay1 == lay2 and hash(lay1) == hash(lay2)
    assert lay1 != _layout(("a", EUC), ("q", QUAT_HO))
    calls = []

    def f(x, layout: StateLayout):
        calls.append(1)
        return layout.get(x, "q").sum()

    jf = jax.jit(f, static_argnums=1)
    x = jnp.arange(7.0)
    assert float(jf(x, lay1)) == 3 + 4 + 5 + 6
    jf(x + 1, lay2)  # equal layout: no retrace
    assert len(calls) == 1


# -- views --------------------------------------------------------------------------------------

def test_get_set_flat_and_batched_numpy_and_jax():
    lay = _layout(("a", EUC), ("m", StateSpec((2, 2))), ("q", QUAT))
    x = np.arange(11.0)
    np.testing.assert_array_equal(lay.get(x, "m"), [[3, 4], [5, 6]])
    y = lay.set(x, "m", np.ones((2, 2)))
    assert y is not x and x[3] == 3 and (y[3:7] == 1).all()
    xb = jnp.tile(jnp.arange(11.0), (5, 1))
    assert lay.get(xb, "q").shape == (5, 4)
    yb = lay.set(xb, "a", jnp.zeros((5, 3)))
    assert float(yb[:, :3].sum()) == 0.0 and float(yb[:, 3:].sum()) == float(xb[:, 3:].sum())
    yb = lay.set(xb, "a", jnp.array([7.0, 8, 9]))  # one value broadcast to every world
    np.testing.assert_array_equal(np.asarray(yb[:, :3]), np.tile([7, 8, 9], (5, 1)))
    with pytest.raises(StateError, match=r"'m' has shape \(2, 2\); got a value of shape \(4,\)"):
        lay.set(x, "m", np.ones(4))
    with pytest.raises(StateError, match=r"trailing size 11"):
        lay.get(np.zeros(12), "a")
    with pytest.raises(KeyError, match="no state named 'zz'"):
        lay.get(x, "zz")


def test_reset_checks_everything_before_writing():
    lay = _layout(("a", EUC), ("q", QUAT))
    x = lay.reset({"a": [1, 2, 3]})
    np.testing.assert_array_equal(x, [1, 2, 3, 1, 0, 0, 0])
    xb = lay.reset({"q": np.tile([0, 1.0, 0, 0], (2, 1))}, batch=2)
    assert xb.shape == (2, 7) and (xb[:, 4] == 1).all() and (xb[:, 3] == 0).all()
    base = np.arange(7.0)
    with pytest.raises(StateError, match=r"'q' has shape \(4,\); got a value of shape \(3,\)"):
        lay.reset({"a": [9, 9, 9], "q": [1, 0, 0]}, base=base)
    with pytest.raises(StateError, match=r"unknown state\(s\) \['b'\]"):
        lay.reset({"a": [9, 9, 9], "b": 1.0}, base=base)
    np.testing.assert_array_equal(base, np.arange(7.0))  # nothing half-changed


def test_segment_contiguous_and_refusals():
    lay = _layout(("a", EUC), ("b", EUC), ("q", QUAT), ("c", EUC))
    assert lay.segment(["b", "a"]) == slice(0, 6)
    assert lay.segment(["a", "b", "q", "c"]) == slice(0, 13)
    with pytest.raises(StateError, match=r"not contiguous: \['b', 'q'\] lie between 'a' and 'c'"):
        lay.segment(["a", "c"])
    with pytest.raises(KeyError):
        lay.segment(["nope"])
    with pytest.raises(StateError, match="at least one"):
        lay.segment([])


# -- hypothesis: random registration sequences ----------------------------------------------------

spec_strategy = st.one_of(
    st.builds(StateSpec, st.tuples(st.integers(0, 3), st.integers(1, 3)).map(lambda s: s[:1] if s[0] == 0 else s),
              error_control=st.sampled_from(["state", "component"])),
    st.just(QUAT), st.just(QUAT_HO),
    st.builds(StateSpec, st.integers(1, 5).map(lambda n: (n,)), noise_count=st.integers(0, 2)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(spec_strategy, min_size=1, max_size=12))
def test_offsets_contiguous_disjoint_in_registration_order(specs):
    names = [f"s{i}" for i in range(len(specs))]
    lay = _layout(*zip(names, specs))
    assert lay.names == tuple(names)
    value_off = deriv_off = 0
    for r, spec in zip(lay, specs):
        assert r.offset == value_off and r.size == spec.size
        assert r.deriv_offset == deriv_off and r.deriv_size == spec.deriv_size
        value_off += spec.size
        deriv_off += spec.deriv_size
    assert lay.size == value_off and lay.deriv_size == deriv_off
    covered = np.zeros(lay.size, int)
    for r in lay:
        covered[r.value_slice] += 1
    assert (covered == 1).all()  # disjoint and complete
    # Runs cover exactly the Euclidean states, never a special one, and are maximal.
    in_runs = np.zeros(lay.size, int)
    for u in lay.runs:
        in_runs[u.value_slice] += 1
        assert all(lay[n].update == "euclidean" for n in u.names)
    for r in lay:
        assert (in_runs[r.value_slice] == (r.update == "euclidean")).all()
    for u, v in zip(lay.runs, lay.runs[1:]):
        assert u.offset + u.size < v.offset  # something special separates them
    assert lay.diffusion_size == sum(s.noise_count * s.tangent_size for s in specs)


def test_quaternion_highorder_is_a_deprecated_name_of_quaternion_qdot():
    import warnings

    from mjharness.adapters import MjScene

    with pytest.warns(DeprecationWarning, match="quaternion_qdot"):
        spec = StateSpec(shape=(4,), update="quaternion_highorder")
    assert spec.update == "quaternion_qdot" and spec.deriv_shape == (4,)
    with pytest.warns(DeprecationWarning):
        sc = MjScene("ball_chain", quaternion_update="quaternion_highorder")
    assert sc.quaternion_update == "quaternion_qdot"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert StateSpec(shape=(4,), update="quaternion_qdot").update == "quaternion_qdot"
