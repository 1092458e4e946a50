"""What every dynamics backend declares and implements (``adapters/backends``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from mjharness.integrators import ContractError, Integrator
from mjharness.integrators.names import BackendName, IntegratorKind, Name, OutputSemantics

if TYPE_CHECKING:
    import mujoco
    from jax import Array
    from jax.typing import ArrayLike

# capability -> how a refusal names it
CAPABILITIES = {
    "mjx_data": "MJX data of a state (MjScene.forward / to_mjx / with_model)",
    "differentiable": "differentiation (jax.grad / jax.jvp, simulate; fit's exact Jacobian)",
    "per_world_params": "per-world model parameters (model_params)",
    "extra_states": "extra states (add_state: their derivative_fn reads MJX data)",
    "body_noise": "body noise (add_body_noise: the body Jacobian of MJX data)",
    "joint_noise": "joint noise (add_joint_noise)",
    "outputs": "recorded MuJoCo outputs",
    "callable_outputs": "callable outputs fn(scene, t, x, data) (data is MJX data)",
    "float64": "float64 dynamics",
    "per_world_outputs": "recorded outputs evaluated on per-world model fields",
    "force_providers": "force providers (add_force: evaluated between the velocity and acceleration stages)",
    "batch_invariant": "a world's numbers independent of its batch (each world stepped alone: a replay of one "
                       "world is bit for bit)",
}


class CtrlMode(Name):
    """What gives a run's controls: NONE (the scene's ``data.ctrl``), ARRAY (per-step controls), CALLABLE (a
    function of (t, x) at every step) or CONTROLLER (a controller with state, ``rollout/engine/episodes.py``)."""

    NONE = "none"
    ARRAY = "array"
    CALLABLE = "callable"
    CONTROLLER = "controller"


@dataclass(frozen=True)
class ChunkStatic:
    """What a chunk of a run depends on besides array shapes and the run's values: the key of the engine's
    compiled chunk function (``rollout/engine/chunk.py``), and what a backend running whole chunks itself is
    handed (``Backend.chunk_runner``, with a ``ChunkRun``).

    Attributes:
        integ: the integrator object; kind: its kind ("fixed" | "stochastic" | "adaptive").
        ctrl_mode: what gives the controls; ctrl_fn: the control function (CALLABLE) or None.
        params: ((field, per-world shape), ...) model fields set per world (MjModel names, ``opt.<name>``).
        carry: ((name, shape), ...) carried between steps, in file order; () = nothing carried.
        samples: recorded samples per chunk; record_every: steps per recorded sample.
        batch: worlds (the compiled chunk's: padded to a multiple of the device count); n: state size; nu: controls.
        devices: the devices the batch is sharded over.
        outputs: adapters.outputs.OutputSpec rows; () = none (the chunk is as without outputs).
        semantics: when the outputs are evaluated.
        remat_step: jax.checkpoint each step too (simulate): reverse mode keeps states, not MJX data.
        episodes: the closed loop (``rollout.engine.episodes.EpisodePlan``: a controller with state / a
            termination rule), or None.
    """

    integ: Integrator
    kind: IntegratorKind
    ctrl_mode: CtrlMode
    ctrl_fn: Any
    params: tuple
    carry: tuple
    samples: int
    record_every: int
    batch: int
    n: int
    nu: int
    devices: tuple
    outputs: tuple = ()
    semantics: OutputSemantics = OutputSemantics.LIVE
    remat_step: bool = False
    episodes: Any = None

    @property
    def chunk(self) -> int:
        """Steps per chunk."""
        return self.samples * self.record_every

    @property
    def closed_loop(self) -> bool:
        """A termination rule or a controller with state runs between steps."""
        return self.episodes is not None


@dataclass(frozen=True)
class ChunkRun:
    """What a backend running whole chunks itself needs beyond the ``ChunkStatic``: the run's values.

    Attributes:
        dt: the step; t0: time of step 0; steps: total steps of the run.
        values: ((field, (B, ...) values), ...) the per-world model fields of ``ChunkStatic.params``.
        loop: the run's closed loop on whole-batch host arrays (``rollout.engine.host_loop.HostLoop``), for a
            backend that steps whole segments itself and runs the loop between them; None without one.
    """

    dt: float
    t0: float
    steps: int
    values: tuple = ()
    loop: Any = None


class BackendError(ContractError):
    """A request the chosen dynamics backend cannot serve (e.g. differentiation through MuJoCo C)."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; every field is a key of ``CAPABILITIES``.

    Attributes:
        mjx_data: evaluations give MJX data (``MjScene.forward``, ``to_mjx``, ``with_model``).
        differentiable: JAX can differentiate through its evaluations.
        per_world_params: per-world model fields (``model_params``).
        extra_states: ``add_state`` extras (derivatives read MJX data).
        body_noise: ``add_body_noise`` (needs the body Jacobian of MJX data).
        joint_noise: ``add_joint_noise``.
        outputs: recorded MuJoCo outputs (``outputs=``).
        callable_outputs: user output functions ``fn(scene, t, x, data)`` on MJX data.
        float64: dynamics evaluated in float64 (MJWarp's kernels are float32 only).
        per_world_outputs: recorded outputs evaluated on each world's own model fields.
        force_providers: ``add_force`` providers evaluated at every stage.
        batch_invariant: a world's numbers do not depend on the batch it ran in (MuJoCo C steps each world with
            its own ``mj_step``; XLA and CUDA kernels compile per batch size), so one world run alone repeats it
            bit for bit (``rollout.replay``).
    """

    mjx_data: bool
    differentiable: bool
    per_world_params: bool
    extra_states: bool
    body_noise: bool
    joint_noise: bool
    outputs: bool
    callable_outputs: bool
    float64: bool
    per_world_outputs: bool = True
    force_providers: bool = True
    batch_invariant: bool = False

    def has(self, cap: str) -> bool:
        if cap not in CAPABILITIES:
            raise KeyError(f"unknown backend capability {cap!r}; known: {sorted(CAPABILITIES)}")
        return bool(getattr(self, cap))


assert {f.name for f in fields(Capabilities)} == set(CAPABILITIES)


def check_naconmax(naconmax, name: str, owner: bool) -> None:
    if naconmax is not None and not (owner and isinstance(naconmax, int) and not isinstance(naconmax, bool)
                                     and naconmax >= 1):
        raise BackendError(f"naconmax= is a positive int for backend='warp' only; got {naconmax!r} with "
                           f"backend={str(name)!r}")


def warmstart(carry: dict | None) -> Any:
    """The solver warm start a step's carry holds (``{"qacc_warmstart": (nv,)}``), None without a carry."""
    return None if carry is None else carry["qacc_warmstart"]


class Backend:
    """One dynamics implementation. Subclasses set ``name``, ``caps`` and ``summary`` and implement the
    evaluation hooks; ``MjScene`` calls them with itself as ``scene`` (duck-typed: no import of MjScene).

    A backend keeps what it needs per scene in one object of its own (``scene_state``), which the scene holds
    as ``scene.backend_state`` without looking inside; the hooks read that object and the scene's public
    attributes only."""

    name: BackendName
    caps: Capabilities
    summary: str = ""
    unroll_stages: bool = False  # MjScene.unroll_stages: a stage is cheap to trace (a host call)

    def require(self, cap: str, what: str) -> None:
        """Refuse ``what`` (a user request) when this backend lacks capability ``cap``."""
        if not self.caps.has(cap):
            alt = f"backend='{BackendName.MJX}'" if self.name != BackendName.MJX else "another backend"
            raise BackendError(f"{what} needs {CAPABILITIES[cap]}, which backend={self.name.value!r} does not have: "
                               f"use {alt}")

    def check_options(self, *, threads: int | None, naconmax: int | None) -> None:
        """Backend-specific constructor options (``threads`` for MuJoCo C, ``naconmax`` for warp)."""
        if threads is not None:
            raise BackendError(f"threads= applies to backend='mujoco' only (backend is {self.name.value!r})")
        check_naconmax(naconmax, self.name, owner=False)

    # -- hooks (MjScene calls these) --
    def load(self, src: Any, *, mjx: str = "adapt", unsupported_contacts: str = "refuse",
             need_sensors: bool = False) -> mujoco.MjModel:
        """An MjModel from ``src`` (anything ``load_scene`` takes) for this backend; the keywords are
        ``load_scene``'s MJX adaptation options (backends that run MuJoCo's own model ignore them)."""
        raise NotImplementedError

    def put_model(self, model: mujoco.MjModel, source: str, opts: dict) -> Any:
        """The model as this backend evaluates it (MJX's ``mjx.Model``), None for a backend running MuJoCo's own."""
        return None

    def scene_state(self, model: mujoco.MjModel, data: mujoco.MjData, opts: dict) -> object:
        """This backend's state of one scene (``MjScene.backend_state``, opaque to the scene), made from its
        compiled ``model``, its runtime ``data`` and the constructor options; made again when the model changes."""
        return None

    def threads(self, state: Any) -> int | None:
        """The host threads a scene's evaluations run on (``MjScene.threads``); None where the backend has none."""
        return None

    def data_template(self, state: Any) -> Any:
        """The MJX data of a scene's runtime values that ``MjScene.to_mjx`` writes states into, from the scene's
        ``state``; None for a backend without MJX data."""
        return None

    def evaluate(self, scene: Any, t: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None, ws: ArrayLike | None, *,
                 mode: str = "forward", h: ArrayLike = 0.0, force: ArrayLike | None = None) -> Any:
        """Data of one world at (t, x) with controls ``ctrl`` and solver warm start ``ws`` (MJX data, or MuJoCo C's
        ``host.HostData``); ``mode``/``h``/``force``: MuJoCo C's stage modes (``backends/mujoco_c.py``)."""
        raise NotImplementedError

    def with_params(self, scene: Any, params: dict) -> Any:
        """``scene`` evaluating one world's model fields ``{path: value}`` (default: the MJX model with them); force
        provider parameters (``"force:<provider>.<param>"``) are kept on the copy for the traced providers."""
        from .host_batch import is_force_param

        fields = {k: v for k, v in params.items() if not is_force_param(k)}
        twin = scene.with_model(scene.mjx_model.tree_replace(fields)) if fields else copy.copy(scene)
        return twin.with_force_values({k: v for k, v in params.items() if is_force_param(k)})

    def euler(self, scene: Any, t: ArrayLike, x: ArrayLike, h: ArrayLike, ctrl: ArrayLike | None,
              carry: dict | None) -> tuple[Any, Array]:
        """(data, qacc) of MuJoCo's Euler (implicit joint damping) at step ``h``."""
        raise NotImplementedError

    def implicit(self, scene: Any, t: ArrayLike, x: ArrayLike, h: ArrayLike, ctrl: ArrayLike | None,
                 carry: dict | None) -> tuple[Any, Array, Array | None]:
        """(data, qacc, act_rate or None) of MuJoCo's implicitfast at step ``h``."""
        raise NotImplementedError

    def noise_data(self, scene: Any, t: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None, carry: dict | None) -> Any:
        """Evaluated data at (t, x) from which the joint/body noise diffusion is read."""
        return self.evaluate(scene, t, x, ctrl, warmstart(carry))

    def outputs(self, scene: Any, specs: tuple, t: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None,
                ws: ArrayLike | None) -> dict:
        """{name: value} of the recorded outputs ``specs`` (``adapters.outputs.OutputSpec``) of one world."""
        raise NotImplementedError

    def check_forces(self, scene: Any) -> None:
        """Call ``scene``'s force providers once as this backend will (``providers.ForceError`` on a bad result)."""
        raise NotImplementedError

    def chunk_runner(self, scene: Any, static: ChunkStatic, run: ChunkRun) -> Callable | None:
        """A host function running whole chunks of ``static`` and ``run`` for ``static.batch`` worlds, or None: the
        engine's compiled chunk (``rollout/engine/chunk.py``) then calls this backend stage by stage. The function
        is ``run(x, carry, status, status_step, k0, ctrl) -> HostChunk`` (``backends/host_chunk.py``)."""
        return None

    def cast_input(self, x: Array, dtype: Any) -> Array:
        """The state as this backend's kernels take it."""
        return x

    def digest(self, h: Any, scene: Any) -> None:
        """Feed what a trace of ``scene``'s dynamics closes over into the hash ``h``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name.value!r}>"
