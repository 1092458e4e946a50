"""The model in a rollout file: MuJoCo's binary model (lossless), its digest, rebuilding, comparing.

``/model/mjcf`` (MuJoCo's saved XML) prints numbers with limited precision, so a model compiled from
it differs from the one that ran (body masses ~1e-7 relative on public scenes). ``mj_saveModel``
writes every field of the compiled model as it is in memory, so ``/model/mjb`` rebuilds it bit for
bit; the digest over those bytes is deterministic (same model, same MuJoCo version -> same bytes,
checked across processes), which the resume check relies on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from urllib.parse import quote, unquote

import mujoco
import numpy as np

from .errors import RolloutFileError

# ``signature`` is the compiler's hash of the spec (used to match a model to its MjSpec); MJB does
# not hold it, so a loaded model reads 0. The file keeps it as an attribute of /model/mjb instead.
NOT_IN_MJB = ("signature",)

# The name the MJB goes by in the in-memory asset table ``from_binary_path`` reads it from.
_MJB_KEY = "__mjharness_model__.mjb"


def model_mjb(model: mujoco.MjModel) -> bytes:
    """The compiled model as MuJoCo's binary model (``mj_saveModel`` into a buffer)."""
    if not isinstance(model, mujoco.MjModel):
        raise TypeError(f"model_mjb needs an mujoco.MjModel, got {type(model).__name__}")
    buf = np.empty(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buf)
    return buf.tobytes()


def model_sha256(model: mujoco.MjModel | bytes | str) -> str:
    """Hex SHA-256 of a model: an ``MjModel`` or its MJB bytes hash the MJB; an XML string (the
    digest files before ``/model/mjb`` carry) hashes its UTF-8 text."""
    if isinstance(model, mujoco.MjModel):
        data = model_mjb(model)
    elif isinstance(model, str):
        data = model.encode()
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    elif isinstance(model, np.ndarray) and model.dtype == np.uint8:
        data = model.tobytes()
    else:
        raise TypeError(f"model_sha256 takes an MjModel, MJB bytes or an XML string, got {type(model).__name__}")
    return hashlib.sha256(data).hexdigest()


def model_from_mjb(mjb: bytes) -> mujoco.MjModel:
    """An ``MjModel`` loaded from MJB bytes (through MuJoCo's in-memory asset table, no temp file)."""
    return mujoco.MjModel.from_binary_path(_MJB_KEY, {_MJB_KEY: bytes(mjb)})


def model_from_xml(xml: str, assets: dict | None = None) -> mujoco.MjModel:
    """An ``MjModel`` compiled from XML text with its assets (name -> bytes)."""
    return mujoco.MjModel.from_xml_string(xml, dict(assets or {}))


# Asset names may hold "/" (meshes/arm.stl), which HDF5 reads as a group separator.
def saved_model(path, mjb: bytes | None, source: str, mjcf: str, assets, written_with: str) -> mujoco.MjModel:
    """The model a file saved: its MJB (``source`` "auto" or "mjb"), else its XML compiled with ``assets()``
    (a callable: the assets are read only when the XML is compiled); ``RolloutFileError`` naming ``path``."""
    if mjb is not None:
        try:
            return model_from_mjb(mjb)
        except Exception as e:  # MuJoCo refuses MJBs of other versions with a ValueError
            raise RolloutFileError(
                f"{path}: /model/mjb does not load ({str(e).strip()}); it was written with MuJoCo "
                f"{written_with}, this is {mujoco.__version__}; "
                f"model(source='xml') compiles the saved XML instead (not bit-identical)") from None
    if source == "mjb":
        raise RolloutFileError(f"{path}: no /model/mjb (written before the binary model was stored); "
                               f"model(source='xml') compiles the saved XML")
    if not mjcf:
        raise RolloutFileError(f"{path}: holds no model (the rolled-out model is not a MuJoCo scene)")
    try:
        return model_from_xml(mjcf, assets())
    except Exception as e:
        raise RolloutFileError(f"{path}: /model/mjcf does not compile: {str(e).strip()}") from None


def asset_key(name: str) -> str:
    """The dataset name under ``/model/assets`` for asset ``name``."""
    return quote(name, safe="")


def asset_name(key: str) -> str:
    return unquote(key)


# -- comparing models -----------------------------------------------------------------------------

def model_fields(model: mujoco.MjModel) -> dict[str, np.ndarray]:
    """Every numeric field of an ``MjModel`` by dotted name: the arrays, sizes and flags, the
    ``names``/``paths``/``text_data`` buffers, and each field of ``opt``, ``stat`` and ``vis``."""
    out: dict = {}
    _walk(model, "", out)
    return out


def _walk(obj, prefix: str, out: dict) -> None:
    for k in dir(obj):
        if k.startswith("_"):
            continue
        v = getattr(obj, k)
        if callable(v) or isinstance(v, type):  # methods, loaders, nested struct types
            continue
        if isinstance(v, (np.ndarray, bytes, bool, int, float, np.generic)):
            out[prefix + k] = v
        elif type(v).__module__.startswith("mujoco"):  # opt, stat, vis and vis's sub-structs
            _walk(v, prefix + k + ".", out)


def _bits(v) -> tuple:
    if isinstance(v, np.ndarray):
        return v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes()
    if isinstance(v, float):
        return "float", np.float64(v).tobytes()  # bitwise: -0.0 != 0.0, NaN payloads count
    return type(v).__name__, v


def model_differences(a: mujoco.MjModel, b: mujoco.MjModel, ignore: Collection[str] = NOT_IN_MJB) -> list[str]:
    """Fields in which two models differ bit for bit (empty: identical), each as 'field: detail'.
    ``ignore``: field names left out (by default the one field a binary model does not carry)."""
    fa, fb = model_fields(a), model_fields(b)
    for k in ignore:
        fa.pop(k, None)
        fb.pop(k, None)
    out = [f"{k}: only in {'the first' if k in fa else 'the second'} model" for k in sorted(set(fa) ^ set(fb))]
    for k in sorted(set(fa) & set(fb)):
        va, vb = fa[k], fb[k]
        if _bits(va) == _bits(vb):
            continue
        if isinstance(va, np.ndarray) and isinstance(vb, np.ndarray) and va.shape == vb.shape and va.size:
            flat_a, flat_b = va.reshape(-1), vb.reshape(-1)
            i = next(i for i in range(flat_a.size) if _bits(flat_a[i:i + 1]) != _bits(flat_b[i:i + 1]))
            out.append(f"{k}: first difference at flat index {i}: {flat_a[i]!r} vs {flat_b[i]!r}")
        else:
            out.append(f"{k}: {_short(va)} vs {_short(vb)}")
    return out


def _short(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array {v.dtype} {v.shape}"
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."
