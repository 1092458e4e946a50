"""Persistent cache keys independent of the process's trace caches (scenes/compile_key.py)."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import cache_key

from mjharness.scenes import compile_key


def _program(shared: bool, scale: float = 2.0):
    """x -> g(x) + g(x + 1) with g jitted: one private function when both calls are the same jitted function (as
    when JAX finds the trace in its caches), two identical ones under two names when they are not."""
    g1 = jax.jit(lambda x: jnp.sin(x) * scale)
    g2 = g1 if shared else jax.jit(lambda x: jnp.sin(x) * scale)
    return jax.jit(lambda x: g1(x) + g2(x + 1.0)).lower(jnp.ones(3)).compiler_ir("stablehlo")


def _keys(module) -> tuple[str, str]:
    ours, theirs = hashlib.sha256(), hashlib.sha256()
    compile_key._hash_computation(ours, module, cache_key.IgnoreCallbacks.NO)
    compile_key._jax_hash(theirs, module, cache_key.IgnoreCallbacks.NO)
    return ours.hexdigest(), theirs.hexdigest()


def test_configure_installed_it():
    import os

    from mjharness.scenes import settings

    if not settings.cache_dir() or os.environ.get("MJHARNESS_CANONICAL_CACHE_KEYS", "1") in ("0", "false", "off"):
        pytest.skip("no compile cache, or its canonical keys turned off, in this environment")
    assert compile_key.installed() and cache_key._hash_computation is compile_key._hash_computation


def test_sharing_and_numbering_of_private_functions_do_not_change_the_key():
    shared, split = _program(True), _program(False)
    assert str(shared).count("func.func") == 2 and str(split).count("func.func") == 3
    (ours_a, jax_a), (ours_b, jax_b) = _keys(shared), _keys(split)
    assert jax_a != jax_b  # JAX's own hashing: two keys for one program
    assert ours_a == ours_b


def test_any_other_difference_changes_the_key():
    base = _keys(_program(True))[0]
    assert _keys(_program(True, scale=3.0))[0] != base  # a constant inside a private function
    other = jax.jit(lambda x: jnp.cos(x) * 2.0)
    g = jax.jit(lambda x: jnp.sin(x) * 2.0)
    mod = jax.jit(lambda x: g(x) + other(x + 1.0)).lower(jnp.ones(3)).compiler_ir("stablehlo")
    assert _keys(mod)[0] != base  # another callee
    assert _keys(_program(True).operation.clone())[0] == base  # the same module again
    big = np.arange(100_000.0)  # a large constant is hashed whole, not elided
    other_big = big.copy()
    other_big[50_000] += 1e-9
    assert len({_keys(jax.jit(lambda x, c=c: x + c).lower(jnp.ones(100_000)).compiler_ir("stablehlo"))[0]
                for c in (big, other_big)}) == 2
    wide = jax.jit(lambda x: jax.jit(lambda y: jnp.sin(y) * 2.0)(x)).lower(jnp.ones(4)).compiler_ir("stablehlo")
    assert _keys(wide)[0] != base


@pytest.mark.parametrize("text, same", [
    ('module @m {\n  func.func public @main() {\n    call @f() : () -> ()\n  }\n  func.func private @f() {\n'
     '    return\n  }\n}\n', True),
    ('module @m {\n  func.func public @main() {\n    call @f_3() : () -> ()\n  }\n  func.func private @f_3() {\n'
     '    return\n  }\n}\n', True),
    ('module @m {\n  func.func public @main() {\n    call @f() : () -> ()\n  }\n  func.func private @f() {\n'
     '    stablehlo.return\n  }\n}\n', False),
    ('module @m {\n  func.func public @entry() {\n    call @f() : () -> ()\n  }\n  func.func private @f() {\n'
     '    return\n  }\n}\n', False),
])
def test_canonical_text(text, same):
    ref = ('module @m {\n  func.func public @main() {\n    call @g() : () -> ()\n  }\n  func.func private @g() {\n'
           '    return\n  }\n}\n')
    assert (compile_key.canonical_ir(text) == compile_key.canonical_ir(ref)) is same


def test_install_is_idempotent_and_refuses_an_unknown_hook(monkeypatch):
    assert compile_key.install()
    monkeypatch.setattr(compile_key, "_installed", False)
    monkeypatch.setattr(cache_key, "_hash_computation", lambda hash_obj, module: None)
    assert not compile_key.install()  # another signature: JAX's hashing stays
    assert not compile_key.installed()


def test_a_program_lowered_another_way_hits_the_cached_executable(tmp_path):
    """End to end in a fresh process on an empty cache: the program with two private functions is compiled and
    written; the same program with one shared function is then read back (a cache hit), not compiled again."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import jax, jax.numpy as jnp
        from mjharness.scenes import settings
        settings.configure()
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        events = []
        jax.monitoring.register_event_listener(lambda e, **kw: events.append(e))
        x = jnp.ones(3)
        g1 = jax.jit(lambda x: jnp.sin(x) * 2.0)
        g2 = jax.jit(lambda x: jnp.sin(x) * 2.0)
        jax.jit(lambda x: g1(x) + g2(x + 1.0))(x).block_until_ready()
        before = events.count("/jax/compilation_cache/cache_hits")
        jax.jit(lambda x: g1(x) + g1(x + 1.0))(x).block_until_ready()
        print(before, events.count("/jax/compilation_cache/cache_hits"))
    """)
    env = dict(os.environ, MJHARNESS_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    before, after = map(int, p.stdout.split()[-2:])
    assert after == before + 1, p.stdout
    env["MJHARNESS_CANONICAL_CACHE_KEYS"] = "0"  # JAX's own keys: the second lowering misses
    p = subprocess.run([sys.executable, "-c", code], env=dict(env, MJHARNESS_CACHE_DIR=str(tmp_path / "b")),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    before, after = map(int, p.stdout.split()[-2:])
    assert after == before, p.stdout
