"""A run's closed loop planned: its controller and termination rule checked by calling them on world 0, the
engine's carry of the loop, and where a reset episode restarts.
"""

from __future__ import annotations

import numpy as np

from mjharness.integrators.names import OutputSemantics

from ..errors import RolloutError
from . import episodes as _ep
from .episodes import Controller, EpisodePlan
from .inputs import _perturb_scale, check_outputs
from .scene_view import SceneView


def check_episodes(scene, start, x0: np.ndarray, carry_spec: tuple, carry0: dict, world_offset: int):
    """(EpisodePlan or None, engine carry spec, engine carry0, reset inputs): a run's controller and termination
    rule (and reward) checked by calling them on world 0 (``engine.episodes``), before anything compiles."""
    ctrl, term, rew = start.ctrl, start.terminate, _ep.as_reward(start.reward)
    record_ctrl = callable(ctrl) and not isinstance(ctrl, Controller)  # a ctrl(t, x) function's u: /ctrl too
    if not isinstance(ctrl, Controller) and term is None and not record_ctrl and rew is None:
        return None, (), {}, ()
    view = SceneView.of(scene)
    sensor_specs = ()
    if _ep.wants_sensors(ctrl, term, rew):
        sensor_specs = check_outputs(scene, ("sensordata",), OutputSemantics.LIVE)
    sdim = int(np.prod(sensor_specs[0].shape)) if sensor_specs else 0
    B = x0.shape[0]
    mode, init_world, treedef, leaves, c0 = "jax", False, None, (), {}
    if isinstance(ctrl, Controller):
        mode, init_world, treedef, leaves, c0 = _ep.check_controller(ctrl, x0, world_offset, view.nu, sdim)
    t_mode, t_sensors = ("jax", False) if term is None else _ep.check_termination(term, x0, sdim, world_offset)
    r_mode, r_sensors, r_every = ("jax", False, 1) if rew is None else _ep.check_reward(
        rew, x0, sdim, world_offset, ctrl.every if isinstance(ctrl, Controller) else None)
    resets = term is not None and start.on_terminate == "reset"
    reset_to = _ep.check_reset_to(start.reset_to, scene) if resets else "x0"
    draw_scale: tuple[float, ...] = ()
    quats: tuple[tuple[int, int], ...] = ()
    if reset_to == "draw":
        draw_scale = tuple(float(v) for v in _perturb_scale(view, x0.shape[1], start.perturb, start.perturb_qpos))
        quats = tuple((r.value_slice.start, r.value_slice.stop) for r in scene.layout.special)
    ep = EpisodePlan(controller=ctrl if isinstance(ctrl, Controller) else None, mode=mode, init_world=init_world,
                     treedef=treedef, leaves=leaves, nu=view.nu, terminate=term, terminate_mode=t_mode,
                     terminate_sensors=t_sensors, on_terminate=start.on_terminate, reset_to=reset_to,
                     draw_scale=draw_scale, quaternions=quats, sensor_specs=sensor_specs, record_ctrl=record_ctrl,
                     reward=rew, reward_mode=r_mode, reward_sensors=r_sensors, reward_every=r_every)
    names = {name for name, _ in carry_spec}
    clash = sorted(names & {name for name, _ in ep.carry_spec()})
    if clash:
        raise RolloutError(f"the scene's or integrator's carry names {clash}, which a controller/termination rule "
                           f"carries too")
    init = {_ep.CTRL: np.zeros((B, view.nu)), _ep.EPISODE: np.zeros(B), _ep.EPISODE_START: np.zeros(B),
            _ep.PENDING: np.zeros(B), _ep.REWARD: np.zeros(B), _ep.RETURN: np.zeros(B), **c0}
    engine0 = {name: init[name] for name, _ in ep.carry_spec()}
    reset: tuple = ()  # (x (B, n), cold carry {name: (B, ...)}) or ()
    if resets:
        if reset_to == "x0":
            xr = x0
        elif reset_to == "draw":
            base = np.asarray(view.x0() if view.x0 else scene.layout.default_values(), np.float64)
            xr = np.broadcast_to(base, x0.shape)
        else:
            xr = np.broadcast_to(scene.reset(keyframe=reset_to[4:]), x0.shape)
        reset = (np.array(xr, np.float64), {k: np.array(v) for k, v in carry0.items()})
    return ep, ep.carry_spec(), engine0, reset
