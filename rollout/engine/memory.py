"""How much memory a rollout needs, estimated before anything is allocated, and the refusal when it cannot fit.

A pure function of the run's sizes (``estimate``) and one of the machine (``available``); ``make_plan``
calls ``check`` before it builds the initial states, so ``rollout(..., batch=10**7)`` is refused in
seconds with the estimate and what to change instead of growing until the machine swaps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

F8 = 8
# Host copies of one chunk's samples alive at once: the device_get result, up to two queued in the writer
# thread, and the one being written.
HOST_CHUNK_COPIES = 4
# Per world on the device: the state donated in and returned (2), integrator stages and XLA temporaries.
DEVICE_STATE_COPIES = 8
# MJX data per world relative to MuJoCo's fixed mjData buffer (the arena is not used by MJX).
DEVICE_DATA_FACTOR = 4


@dataclass(frozen=True)
class MemoryEstimate:
    host: int
    device: int
    parts: dict

    @property
    def total(self) -> int:
        return self.host + self.device

    def describe(self) -> str:
        return ", ".join(f"{k} {_gb(v)}" for k, v in self.parts.items() if v)


def _gb(b: int) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**27 else f"{b / 2**20:.1f} MiB"


def estimate(*, n: int, nc: int, batch: int, samples: int, chunk_samples: int, output_width: int, keep: bool,
             nu_steps: int = 0, world_data_bytes: int = 0) -> MemoryEstimate:
    """Host and device bytes of a run: ``n`` state size, ``nc`` carry size, ``batch`` worlds, ``samples`` T,
    ``chunk_samples`` per compiled chunk, ``output_width`` recorded output values per world and sample,
    ``keep`` (the trajectory in memory), ``nu_steps`` = steps * nu of an array ctrl (0 without),
    ``world_data_bytes`` the simulator's per-world data (MuJoCo's mjData buffer; 0 for other models)."""
    row = batch * F8
    parts = dict(
        initial_states=3 * row * n,                              # x0, its perturbation, the padded copy
        trajectory=row * samples * (n + output_width) if keep else 0,
        chunk_buffers=HOST_CHUNK_COPIES * row * chunk_samples * (n + nc + output_width),
        ctrl=row * nu_steps,
    )
    host = sum(parts.values())
    device = (DEVICE_STATE_COPIES * row * (n + nc) + row * chunk_samples * (n + nc + output_width)
              + batch * DEVICE_DATA_FACTOR * world_data_bytes)
    parts["device"] = device
    return MemoryEstimate(host=host, device=device, parts=parts)


def available() -> int:
    """Bytes of memory available now: ``MemAvailable`` of /proc/meminfo, else physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_limit(devices) -> int | None:
    """Bytes of memory of the first accelerator (None: the devices are the host's CPU)."""
    for d in devices or ():
        if getattr(d, "platform", "cpu") == "cpu":
            return None
        try:
            return int((d.memory_stats() or {}).get("bytes_limit", 0)) * len(devices) or None
        except Exception:  # noqa: BLE001 - a backend without memory_stats: no device check
            return None
    return None


def refusal(est: MemoryEstimate, host_avail: int, device_avail: int | None) -> str | None:
    """The reason a run cannot fit (None: it fits). On CPU the "device" is host memory too."""
    need_host = est.host + (est.device if device_avail is None else 0)
    if need_host > host_avail:
        where = f"host memory: needs about {_gb(need_host)}, {_gb(host_avail)} available"
    elif device_avail is not None and est.device > device_avail:
        where = f"device memory: needs about {_gb(est.device)}, {_gb(device_avail)} on the devices"
    else:
        return None
    return (f"this run does not fit in {where} ({est.describe()}); make it smaller: a smaller chunk (chunk=, "
            f"--chunk) shrinks the chunk buffers, keep=False (the trajectory stays in the file only) drops the "
            f"trajectory copy, and fewer worlds per process (a smaller batch, or --local-processes/--distributed) "
            f"shrinks everything")


_DATA_BYTES: dict = {}  # model sizes -> MjData bytes: an MjData is made once per model shape, not once per run


def _data_bytes(model) -> int:
    """Bytes of one MjData of ``model`` (its buffer), keyed by the model's sizes (its own buffer's size stands for
    the many size fields; an estimate needs no more)."""
    key = tuple(int(getattr(model, f, 0)) for f in ("nbuffer", "narena", "nq", "nv", "nu", "na", "nbody", "ngeom",
                                                     "nsensordata", "njmax", "nconmax"))
    got = _DATA_BYTES.get(key)
    if got is None:
        import mujoco

        got = _DATA_BYTES[key] = int(mujoco.MjData(model).nbuffer)
    return got


def check(*, scene, layout_size: int, batch: int, samples: int, chunk_samples: int, outputs, keep: bool,
          devices, nu_steps: int = 0) -> MemoryEstimate:
    """``estimate`` for a scene about to run; raises ``RolloutError`` (with the estimate) when it cannot fit."""
    from ..errors import RolloutError

    model = getattr(scene, "model", None)
    world_data = _data_bytes(model) if model is not None and hasattr(model, "nq") else 0
    nc = int(getattr(model, "nv", 0) or 0)  # a MuJoCo scene carries its warm start (nv); others: small
    width = sum(int(_prod(o.shape)) for o in outputs or ())
    est = estimate(n=layout_size, nc=nc, batch=batch, samples=samples, chunk_samples=chunk_samples,
                   output_width=width, keep=keep, nu_steps=nu_steps, world_data_bytes=world_data)
    why = refusal(est, available(), device_limit(devices))
    if why:
        raise RolloutError(f"batch={batch}, {samples} samples: {why}")
    return est


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def planned_file_bytes(*, n: int, nc: int, batch: int, samples: int, output_width: int) -> int:
    """Bytes the file's arrays take when every sample is written (uncompressed; the header is small)."""
    return F8 * samples * (1 + batch * (n + nc + output_width)) + F8 * batch * (2 * n + nc + 2)


def check_space(path: str, need: int, *, require: bool) -> str | None:
    """Compare the planned file size with the free space of ``path``'s file system: None when it fits, else
    the warning text (``require``: raise ``RolloutError`` with it instead)."""
    import shutil

    from ..errors import RolloutError

    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free
    except OSError:
        return None
    if need <= free:
        return None
    text = (f"{path}: the file will need about {_gb(need)}, its file system has {_gb(free)} free; the run stops "
            f"cleanly (resumable) when the disk fills")
    if require:
        raise RolloutError(text + " (refused: --require-space / require_space=True)")
    return text
