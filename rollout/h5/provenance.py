"""The code a run called, kept in its file: source text, where it came from, and a digest.

A file names a controller or a termination rule by its qualified name only; that is not enough to
rerun it or to know whether it changed. ``/code/<role>`` (roles ``ctrl``, ``controller.init``,
``controller.step``, ``terminate``, ``output.<name>``) holds the function's source text (``inspect``;
empty where Python has none: a builtin, a compiled function) with attributes ``module``, ``qualname``,
``file``, ``sha256`` (of the source text) and ``importable`` (a module-level name that ``import``
finds again, not a lambda, a closure or the running script's); ``/code/modules/<file>`` holds the
whole text of each file those functions were defined in, so the file alone shows what ran. ``resolve`` finds a recorded
function again and refuses one whose source changed since the run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from urllib.parse import quote

import h5py

from .errors import RolloutFileError


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _source(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _file(fn) -> str:
    try:
        return inspect.getsourcefile(fn) or ""
    except TypeError:
        return ""


def code_record(fn) -> dict:
    """What the file keeps of a function: its source text and where to import it from."""
    fn = inspect.unwrap(fn)
    qualname = getattr(fn, "__qualname__", type(fn).__qualname__)
    text = _source(fn)
    return dict(module=getattr(fn, "__module__", None) or "", qualname=qualname, file=_file(fn), source=text,
                sha256=_sha256(text), importable=_importable(fn, qualname))


def _importable(fn, qualname: str) -> bool:
    """Whether ``import module; module.<qualname>`` can find ``fn`` again in another process: a module-level
    name (not a lambda, not nested), in a module that is not the running script (``__main__``)."""
    module = getattr(fn, "__module__", None)
    named = inspect.isfunction(fn) or inspect.isclass(fn) or inspect.ismethod(fn)  # not a partial, not an instance
    return named and bool(module) and module != "__main__" and "<" not in qualname


def write_code(f: h5py.File, code: dict) -> None:
    """``/code/<role>`` for each role -> function of ``code``, and ``/code/modules/<file>``."""
    if not code:
        return
    g = f.create_group("code")
    g.attrs["long_name"] = "source text of the functions the run called (controller, termination, outputs)"
    files = {}
    for role, fn in code.items():
        rec = code_record(fn)
        ds = g.create_dataset(role, data=rec.pop("source"), dtype=h5py.string_dtype())
        for k, v in rec.items():
            ds.attrs[k] = v
        ds.attrs["long_name"] = f"source of the run's {role} function"
        ds.attrs["units"] = "1"
        if rec["file"]:
            files[rec["file"]] = rec["file"]
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            continue
        ds = g.require_group("modules").create_dataset(quote(path, safe=""), data=text, dtype=h5py.string_dtype())
        ds.attrs.update(file=path, sha256=_sha256(text), long_name="a source file of the run's functions", units="1")


def read_code(f: h5py.File) -> dict:
    """{role: {module, qualname, file, sha256, importable, source}} of a file (empty for files before it)."""
    g = f.get("code")
    if g is None:
        return {}
    out = {}
    for role, ds in g.items():
        if isinstance(ds, h5py.Dataset):
            rec = {k: _plain(v) for k, v in ds.attrs.items() if k not in ("long_name", "units")}
            rec["source"] = _plain(ds[()])
            out[role] = rec
    return out


def _plain(v):
    if isinstance(v, bytes):
        return v.decode()
    return v.item() if hasattr(v, "item") else v


def _load(rec: dict):
    """The module of a record: imported by name, or (a file a command line named, module ``mjharness_user.*``)
    loaded from its file under the same name."""
    name, path = rec["module"], rec["file"]
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        if not path:
            raise
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def resolve(path: str, role: str, rec: dict):
    """The function recorded as ``role``: imported again and checked against its recorded source digest."""
    where = f"{path}: /code/{role} ({rec['module']}.{rec['qualname']})"
    if not rec.get("importable"):
        raise RolloutFileError(f"{where} is not importable by name (a lambda, a nested function, a partial or "
                               f"the running script's); rerun it from Python with the same function")
    try:
        obj = _load(rec)
        for part in rec["qualname"].split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, OSError) as e:
        raise RolloutFileError(f"{where} cannot be imported ({type(e).__name__}: {e})") from None
    now = _sha256(_source(inspect.unwrap(obj)))
    if rec.get("sha256") and now != rec["sha256"]:
        raise RolloutFileError(f"{where}: the source changed since the run (sha256 {now[:12]}, recorded "
                               f"{rec['sha256'][:12]}); /code/{role} holds the recorded text")
    return obj
