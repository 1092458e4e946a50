"""One logical rollout file over the per-process shards of a multi-process run.

Each process ``k`` of ``N`` writes ``<out>.p<k>-of-<N>.h5`` (format v1 for its worlds, attrs
``world_offset``/``global_batch``, dataset ``/world_index``). ``join_shards`` writes ``<out>``: every
time-major dataset (T, B_k, ...) and every per-world dataset (B_k, ...) of the shards becomes an HDF5
virtual dataset over the shards in global world order; everything else (model, layout, time) is
copied from shard 0. ``samples`` is the fewest any shard flushed; ``complete`` only when all are.
The joined file carries the same named axes (HDF5 dimension scales: ``time``, ``world``, ``state``, ...)
as a single-process file, so xarray/netCDF readers see it the same way (``_mirror_axes``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

from .digest import INTEGRITY_GROUP
from .format import LIBVER, RolloutFileError, decode_attr
from .reader import open_rollout
from .reading import open_h5

PER_WORLD = ("x0", "status", "status_step", "carry0", "world_index")
INTEGRITY = INTEGRITY_GROUP + "/"  # shard 0's content hashes: the joined file gets its own
SCALE_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME")  # HDF5 dimension scales' bookkeeping


def shard_path(out: str, k: int, n: int) -> str:
    return f"{out}.p{k}-of-{n}.h5"


def shard_paths(out: str, n: int) -> list[str]:
    return [shard_path(out, k, n) for k in range(n)]


def _shard_info(paths):
    infos = []
    for p in paths:
        if not os.path.isfile(p):
            raise RolloutFileError(f"shard {p}: no such file")
        with open_rollout(p) as r:  # a SWMR reader: also a shard its killed worker left open
            f = r.h5
            infos.append(dict(path=p, offset=int(f.attrs.get("world_offset", 0)), B=int(f["x"].shape[1]),
                              samples=r.samples, complete=r.complete))
    infos.sort(key=lambda i: i["offset"])
    expect = 0
    for i in infos:
        if i["offset"] != expect:
            raise RolloutFileError(f"shard {i['path']}: world_offset {i['offset']}, expected {expect} "
                                   f"(shards must tile the batch)")
        expect += i["B"]
    return infos, expect


def _datasets(group, prefix=""):
    for name, obj in group.items():
        if isinstance(obj, h5py.Dataset):
            yield prefix + name, obj
        else:
            yield from _datasets(obj, prefix + name + "/")


def _axis(name: str, ds, T: int, B: int) -> int | None:
    """The world axis of a shard dataset (1 time-major, 0 per-world) or None (copied as is)."""
    base = name.rsplit("/", 1)[-1]
    if decode_attr(ds.attrs.get("CLASS")) == "DIMENSION_SCALE":
        return None  # an axis: copied (world axes are rebuilt over the whole batch in _mirror_axes)
    if name.startswith("model_params/") or base in PER_WORLD:
        return 0 if ds.shape[:1] == (B,) else None
    if name in ("qpos", "qvel"):
        return None  # rebuilt over the joined /x
    if ds.ndim >= 2 and ds.shape[:2] == (T, B):
        return 1
    return None


def _join_one(out_f, name, dsets, infos, B_total, axis):
    shape = list(dsets[0].shape)
    shape[axis] = B_total
    lay = h5py.VirtualLayout(shape=tuple(shape), dtype=dsets[0].dtype)
    for ds, i in zip(dsets, infos):
        src = h5py.VirtualSource(os.path.basename(i["path"]), name, shape=ds.shape)
        sel = [slice(None)] * len(shape)
        sel[axis] = slice(i["offset"], i["offset"] + i["B"])
        lay[tuple(sel)] = src
    fill = np.nan if dsets[0].dtype.kind == "f" else 0
    vds = out_f.create_virtual_dataset(name, lay, fillvalue=fill)
    for key, value in dsets[0].attrs.items():  # units, semantics, mujoco_field, ...; not the axes (_mirror_axes)
        if key not in SCALE_ATTRS:
            vds.attrs[key] = value


def join_shards(out: str, paths: Iterable[str]) -> dict:
    """Write ``out`` over ``paths``; returns {"samples", "complete", "batch"}. Shards sit beside ``out``."""
    from .digest import content_digest, seal
    from .integrity import shard_identity

    infos, B_total = _shard_info(list(paths))
    samples = min(i["samples"] for i in infos)
    complete = all(i["complete"] for i in infos)
    files = [open_h5(i["path"])[0] for i in infos]
    tmp = out + ".joining"
    try:
        f0 = files[0]
        T = f0["x"].shape[0]
        for f, i in zip(files, infos):
            if f["x"].shape[0] != T:
                raise RolloutFileError(f"shard {i['path']}: /x has {f['x'].shape[0]} samples allocated, shard 0 {T}")
        with h5py.File(tmp, "w", libver=LIBVER) as g:
            _root(g, f0, infos, B_total, samples, complete)
            _join_datasets(g, files, infos, B_total, T)
            _describe(g)
            g.attrs["shard_digests"] = [shard_identity(i["path"]) for i in infos]  # a replaced shard is told
            if "content_sha256" in g.attrs:  # batch and shards differ from shard 0's settings
                g.attrs["content_sha256"] = content_digest(g)
            seal(g, create=True, from_data=True)  # the copied /time's rows are all there
        os.replace(tmp, out)
    finally:
        for f in files:
            f.close()
        if os.path.exists(tmp):
            os.remove(tmp)
    _episode_table(out, complete)
    return dict(samples=samples, complete=complete, batch=B_total)


def _root(g: h5py.File, f0: h5py.File, infos: list[dict], B_total: int, samples: int, complete: bool) -> None:
    """The joined file's root attributes (shard 0's, for the whole batch) and ``/progress``."""
    for k, v in f0.attrs.items():
        g.attrs[k] = v
    for k in ("world_offset", "process_index"):
        if k in g.attrs:
            del g.attrs[k]
    g.attrs["batch"] = B_total
    if "title" in g.attrs:  # CF: the whole batch, not shard 0's share
        from . import cf

        g.attrs["title"] = cf.title({k: decode_attr(v) for k, v in g.attrs.items()})
    g.attrs["samples"] = samples
    g.attrs["complete"] = complete
    g.attrs["shards"] = [os.path.basename(i["path"]) for i in infos]
    g.create_dataset("progress", data=np.array([samples, int(complete)], dtype=np.int64))


def _join_datasets(g: h5py.File, files: list[h5py.File], infos: list[dict], B_total: int, T: int) -> None:
    """Every dataset of shard 0 in ``g``: per-world and time-major ones virtual over the shards, the rest
    copied; the groups' attributes, the world axes and the qpos/qvel views."""
    from .axes import _virtual
    from .layout import vds_segment

    f0 = files[0]
    for name, ds in _datasets(f0):
        if name in ("progress", "episodes", "episode_row") or _is_world_scale(ds) or name.startswith(INTEGRITY):
            continue  # the joined file's own: above, the world axes in _mirror_axes, /episodes and hashes below
        axis = _axis(name, ds, T, infos[0]["B"])
        if axis is None and name not in ("qpos", "qvel"):
            f0.copy(ds, g, name=name)
            continue
        if axis is not None:
            _join_one(g, name, [f[name] for f in files], infos, B_total, axis)
    _copy_group_attrs(f0, g)
    _mirror_axes(g, f0, B_total)
    n = f0["x"].shape[2]
    for name in ("qpos", "qvel"):
        if name in f0:
            _virtual(g, name, vds_segment(f0[name]), T, B_total, n)  # with their axes
            g[name].attrs.update({k: v for k, v in f0[name].attrs.items() if k not in SCALE_ATTRS})


def _episode_table(out: str, complete: bool) -> None:
    """A run with a termination rule: the joined file's ``/episodes``, every world's (shards hold their own)."""
    from .writer import write_episode_table

    with open_rollout(out) as f:
        if not (complete and f.attrs.get("terminate")):
            return
        rows = f.episode_table()
    write_episode_table(out, rows)


def _describe(g: h5py.File) -> None:
    """CF attributes of the joined file's own datasets (``/progress``; ``/world_index`` of older shards)."""
    from . import cf

    for name in ("progress", "world_index"):
        if name in g and "long_name" not in g[name].attrs:
            cf.describe(g[name], *cf.VARIABLES[name])


def _copy_group_attrs(f0: h5py.File, g: h5py.File) -> None:
    """The attributes of shard 0's groups (a table's ``columns``, ``long_name``) on the joined file's groups."""
    def visit(name, obj):
        if isinstance(obj, h5py.Group) and name in g:
            for k, v in obj.attrs.items():
                g[name].attrs[k] = v
    f0.visititems(visit)


def _is_world_scale(ds) -> bool:
    return ds.name.rsplit("/", 1)[-1] == "world" and ds.attrs.get("CLASS") in (b"DIMENSION_SCALE", "DIMENSION_SCALE")


def _scale_paths(ds) -> list[list[str]]:
    """Per axis of a shard dataset, the paths of the dimension scales attached to it."""
    try:
        return [[s.name.lstrip("/") for s in dim.values()] for dim in ds.dims]
    except Exception:  # an unreadable reference: that dataset stays unlabelled
        return [[] for _ in range(ds.ndim)]


def _mirror_axes(g: h5py.File, f0: h5py.File, B_total: int) -> None:
    """Give the joined file shard 0's named axes: the copied datasets lose their dimension-scale references
    (object references into the shard, meaningless here), every ``world`` scale is rebuilt over the whole batch,
    and each scale attached to a shard dataset is attached to the joined dataset of the same name."""
    for _, ds in _datasets(g):
        for key in SCALE_ATTRS[:2]:
            if key in ds.attrs:
                del ds.attrs[key]
    for name, ds in _datasets(f0):
        if _is_world_scale(ds):
            world = g.create_dataset(name, data=np.arange(B_total, dtype=np.int64))
            world.make_scale("world")
            world.attrs.update({k: v for k, v in ds.attrs.items() if k not in SCALE_ATTRS})
    for name, ds in _datasets(f0):
        if name in ("qpos", "qvel") or name not in g:  # qpos/qvel: rebuilt with their axes by axes._virtual
            continue
        target = g[name]
        for i, paths in enumerate(_scale_paths(ds)):
            for path in paths:
                if path in g and i < target.ndim and g[path].shape[0] == target.shape[i]:
                    target.dims[i].attach_scale(g[path])
    if "world_index" in g and "world" in g and not len(g["world_index"].dims[0]):  # shards written before its axis
        g["world_index"].dims[0].attach_scale(g["world"])


def shard_attr(path: str, key: str) -> Any:
    with open_rollout(path) as f:
        return decode_attr(f.h5.attrs.get(key))
