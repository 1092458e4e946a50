"""Persistent compilation cache keys that do not depend on what the process traced before.

JAX keys its persistent cache on the lowered module's bytes (debug info stripped). Those bytes hold the module's
private functions under names JAX numbers as it meets them (``@_take_113``, ``@_where_73``) and, for nested jitted
calls whose trace JAX finds in its in-memory caches, one shared function where a process that had not traced them
emits several. The same program lowered in a fresh process and in a process that ran other work first (a test
worker, a notebook, a CLI run after ``fit``) therefore gets different keys: measured on ``simulate``'s gradient of a
double pendulum, 562 vs 578 functions and another key, and on the suite's 2 workers whole XLA compiles repeated
(20 s for one contact scene's RK4 chunk) although the cache held the program from an earlier run.

``canonical_ir`` hashes the module as a call graph instead: every function stands for the hash of its text with its
own name left out and each callee's name replaced by the callee's hash, so the numbering and the sharing of identical
functions no longer change the key, while any difference in any function's operations, types, attributes or in the
module's attributes still does. XLA inlines every call before it optimizes, so modules with the same key compile to
the same program. ``install()`` puts it in place of ``jax._src.cache_key._hash_computation`` (JAX's own hashing of
the computation; every other part of the key is JAX's), where that private function has the signature this was
written for; elsewhere JAX's hashing stays.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable

__all__ = ["canonical_ir", "install", "installed"]

# A top-level function of a printed module: "  func.func [visibility] @name(" at two spaces of indentation.
_FUNC = re.compile(r'^  func\.func (?:(?:public|private|nested) )?@("[^"]*"|[\w$.\-]+)', re.M)
_SYMBOL = re.compile(r'@("[^"]*"|[\w$.\-]+)')

_installed = False
_jax_hash: Callable | None = None  # JAX's own _hash_computation, kept by install()


def _functions(text: str) -> tuple[str, dict[str, str]]:
    """(the module's text but its functions, {name: that function's text})."""
    starts = [(m.start(), m.group(1)) for m in _FUNC.finditer(text)]
    if not starts:
        return text, {}
    close = text.rstrip().rfind("\n}")  # the module's closing brace: no function's text
    bodies = {}
    for (start, name), (end, _) in zip(starts, starts[1:] + [(close, "")]):
        bodies[name] = text[start:end].rstrip()
    return text[:starts[0][0]] + text[close:], bodies


def canonical_ir(text: str) -> bytes:
    """The call-graph digest of a printed module ``text`` (debug info stripped): the module's header and every
    function's name-free digest in the order of the text, each callee named by its own digest."""
    head, bodies = _functions(text)
    memo: dict[str, str] = {}

    def digest(name: str, path: tuple = ()) -> str:
        got = memo.get(name)
        if got is None:
            if name in path:  # a recursive call (XLA has none; keep such a module distinct by name)
                return name
            body = bodies[name]
            own = body.index("@") + len(name) + 1  # the function's own name, after "func.func ... @"

            def callee(m: re.Match) -> str:
                ref = m.group(1)
                return "@" + digest(ref, path + (name,)) if ref in bodies else m.group(0)

            text_ = body[:body.index("@")] + _SYMBOL.sub(callee, body[own:])
            got = memo[name] = hashlib.sha256(text_.encode()).hexdigest()
        return got

    h = hashlib.sha256(_SYMBOL.sub(lambda m: "@" + digest(m.group(1)) if m.group(1) in bodies else m.group(0),
                                   head).encode())
    public = [n for n, b in bodies.items() if not b.startswith("  func.func private")]
    for name in public:  # the entry points by name (main) and content; private ones count through their callers
        h.update(name.encode() + b"=" + digest(name).encode())
    return h.hexdigest().encode()


def _hash_computation(hash_obj, module, ignore_callbacks) -> None:
    from jax._src import cache_key, config
    from jax._src.lib.mlir import passmanager

    if config.compilation_cache_include_metadata_in_key.value and _jax_hash is not None:  # metadata asked for
        _jax_hash(hash_obj, module, ignore_callbacks)
        return
    with module.context:
        m = module.operation.clone()
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(m)
        m = cache_key._remove_callbacks(m, ignore_callbacks)  # host callback pointers differ per process
        hash_obj.update(canonical_ir(m.get_asm(enable_debug_info=False)))


def install() -> bool:
    """Hash computations with ``canonical_ir`` in JAX's persistent cache keys; False (JAX's own hashing kept) where
    JAX's private hook is not the one this was written for."""
    global _installed, _jax_hash
    if _installed:
        return True
    try:
        from jax._src import cache_key
    except ImportError:
        return False
    original = getattr(cache_key, "_hash_computation", None)
    needed = ("_remove_callbacks", "_canonicalize_ir")
    if (original is None or not all(hasattr(cache_key, n) for n in needed)
            or list(inspect.signature(original).parameters) != ["hash_obj", "module", "ignore_callbacks"]):
        return False
    _jax_hash = original
    cache_key._hash_computation = _hash_computation
    _installed = True
    return True


def installed() -> bool:
    """Whether ``install()`` replaced JAX's hashing in this process."""
    return _installed
