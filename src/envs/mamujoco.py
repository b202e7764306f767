"""``mamujoco``: Gymnasium-Robotics' Multi-Agent MuJoCo with Safety-Gymnasium's velocity cost.

The env is ``gymnasium_robotics.mamujoco_v1.parallel_env(scenario, agent_conf, agent_obsk)``
itself: Gymnasium's ``{scenario}-v5`` MuJoCo robot whose actuated joints are split among the
agents (``agent_conf="2x3"``: two agents of three joints each). It is wrapped the way every task
given by import path is (:mod:`src.envs.task`): a :class:`~src.envs.task.CostParallelEnv` adds
the cost and the hidden cap, and a list of copies stands behind the vector interface.

- Observation of an agent (mamujoco's, float64, flattened): the positions and velocities of
  its own joints, the positions of the joints up to ``agent_obsk`` edges away in the robot's
  joint graph (Ant: also their external contact forces), and the robot's global ``qpos`` and
  ``qvel`` entries of the scenario (the torso's). Sizes may differ between agents; the vector
  env zero-pads them to the largest.
- Actions: a Box per agent, one entry per joint it drives, in [-1, 1] (float32); the vector env
  clips Box actions to the box.
- Reward: the robot's Gymnasium reward, the same for every agent (mamujoco's team reward), e.g.
  HalfCheetah's forward velocity minus ``0.1 |a|^2``; Ant's adds 1 per step while healthy and
  subtracts contact costs.
- Cost: Safety-Gymnasium's multi-agent velocity cost (``safety_gymnasium/tasks/
  safe_multi_agent/tasks/velocity/safe_mujoco_multi.py``, ``TASK_VELCITY_THRESHOLD``): 1 for
  every agent at a step whose velocity exceeds the threshold published for the scenario and
  split (:data:`VELOCITY_THRESHOLDS`), else 0. The velocity is the one Safety-Gymnasium
  compares: the planar speed ``sqrt(x_velocity**2 + y_velocity**2)`` of the robot's infos (a
  robot that reports no ``y_velocity`` compares ``|x_velocity|``), and on ``Swimmer`` the signed
  ``x_velocity``. Gymnasium computes the velocities from the torso's position before and after
  the step, divided by the step's duration.
- Episodes end when the robot stops being healthy (Ant, Hopper and Walker2d terminate) or at the
  hidden cap ``max_steps``; Gymnasium's own time limit of the robot is set to the same cap.

Humanoid ``9|8``, the remaining entry of Safety-Gymnasium's table, is not offered: its agents
drive 9 and 8 joints, and the pipeline needs one action space shared by all agents.

Seeding: ``reset(seed=s)`` seeds the robot's generator (Gymnasium's reset noise); automatic
resets continue each copy's stream, so copy ``e`` of a batch seeded ``s`` equals a single env
seeded ``s + e``. A snapshot holds each copy's MuJoCo integration state (``mj_getState`` with
``mjSTATE_INTEGRATION``: time, ``qpos``, ``qvel``, activations, controls, solver warm start),
the body positions the last step left (Gymnasium's Ant reads them as the position before the
next step), its generator and its step counter; a restored copy continues bit for bit.

MuJoCo and Gymnasium-Robotics are imported when the task is first built: without them, building
it raises :class:`MuJoCoUnavailableError`, one line saying what to install. Frames come from
MuJoCo's offscreen renderer through EGL (``MUJOCO_GL=egl`` unless the variable is set).

>>> config = MaMuJoCoConfig(scenario="Ant", agent_conf="2x4")
>>> config.agents, config.velocity_threshold
(2, 2.522)
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from src.envs.base import check_config, check_int, check_snapshot, require_reset
from src.envs.parallel import check_render_mode
from src.envs.task import CostParallelEnv, ParallelVectorEnv

__all__ = [
    "INSTALL",
    "NAME",
    "VELOCITY_THRESHOLDS",
    "MaMuJoCoConfig",
    "MaMuJoCoParallelEnv",
    "MaMuJoCoVectorEnv",
    "MuJoCoUnavailableError",
    "VelocityCost",
    "compiler_warnings",
    "load_mamujoco",
]

NAME = "mamujoco"

VELOCITY_THRESHOLDS: dict[tuple[str, str], float] = {
    ("Ant", "2x4"): 2.522,
    ("Ant", "4x2"): 2.418,
    ("HalfCheetah", "2x3"): 3.227,
    ("HalfCheetah", "6x1"): 2.932,
    ("Hopper", "3x1"): 0.9613,
    ("Swimmer", "2x1"): 0.04891,
    ("Walker2d", "2x3"): 1.641,
}
"""Safety-Gymnasium's velocity threshold of each (scenario, agent_conf) offered here, from
``TASK_VELCITY_THRESHOLD`` in ``safety_gymnasium/tasks/safe_multi_agent/tasks/velocity/
safe_mujoco_multi.py`` (PKU-Alignment/safety-gymnasium, unchanged since August 2023)."""

INSTALL = "pip install -c requirements.lock mujoco gymnasium-robotics"
"""How to install what the task imports, at the project's pinned versions."""

# What gymnasium_robotics prints to stderr when imported (a Farama notice about its Adroit hand
# tasks' rewards, which this task does not use), and MuJoCo's compiler warning about an
# attribute of Gymnasium's robot models: both are dropped, anything else is passed on.
_ADROIT_NOTICE = "AdroitHand"
_TOTALMASS_DEPRECATION = "compiler attribute 'settotalmass' is deprecated"
_DEFAULT_GL = "egl"  # the offscreen OpenGL that works headless (MUJOCO_GL)
_GL_PACKAGES = "Debian: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri"


class MuJoCoUnavailableError(ImportError, ValueError):
    """MuJoCo or Gymnasium-Robotics cannot be imported; the message is one line saying what to
    install. It is a ``ValueError`` too, so the workflow's config check reports it in one line
    naming the env, as it reports the env's other refusals."""


def load_mamujoco() -> tuple[ModuleType, Any]:
    """MuJoCo's module and ``mamujoco_v1.parallel_env``, imported on first use.

    Raises :class:`MuJoCoUnavailableError` when either cannot be imported (missing, or broken:
    any error while importing).
    """
    notices = io.StringIO()
    try:
        mujoco = importlib.import_module("mujoco")
        with contextlib.redirect_stderr(notices):
            mamujoco = importlib.import_module(
                "gymnasium_robotics.envs.multiagent_mujoco.mamujoco_v1"
            )
    except Exception as error:  # a missing package, or one that fails while importing
        message = " ".join(str(error).split()) or "no message"
        raise MuJoCoUnavailableError(
            f"env {NAME} needs MuJoCo and Gymnasium-Robotics, which cannot be imported "
            f"({type(error).__name__}: {message}); install them with `{INSTALL}` (or `make setup`)"
        ) from None
    finally:
        rest = [line for line in notices.getvalue().splitlines() if _ADROIT_NOTICE not in line]
        if rest:
            print("\n".join(rest), file=sys.stderr)
    return mujoco, mamujoco.parallel_env


@contextlib.contextmanager
def compiler_warnings(mujoco: ModuleType) -> Iterator[None]:
    """MuJoCo's warnings while the robot's model compiles, as Python warnings.

    MuJoCo's default handler prints them and appends them to ``MUJOCO_LOG.TXT`` in the working
    directory; Gymnasium's models raise the ``settotalmass`` deprecation on every compile.
    """
    previous = mujoco.get_mju_user_warning()
    caught: list[str] = []
    mujoco.set_mju_user_warning(caught.append)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)
    for message in caught:
        if _TOTALMASS_DEPRECATION not in message:
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=3)


@dataclass(frozen=True, kw_only=True)
class MaMuJoCoConfig:
    """Parameters of ``mamujoco``: the robot, its split among the agents, the episode cap."""

    scenario: str = "HalfCheetah"
    """Gymnasium MuJoCo robot (``{scenario}-v5``): Ant, HalfCheetah, Hopper, Swimmer or
    Walker2d."""
    agent_conf: str = "2x3"
    """mamujoco's split of the robot's joints, ``"{agents}x{joints per agent}"``; with the
    scenario, a pair of :data:`VELOCITY_THRESHOLDS`."""
    n_agents: int | None = None
    """Number of agents: must be the count of ``agent_conf`` (None: that count)."""
    max_steps: int = 1000
    """Hidden episode cap (Gymnasium's MuJoCo default; its time limit is set to it)."""
    agent_obsk: int = 1
    """mamujoco's observation depth: an agent observes its own joints and those up to this many
    edges away in the robot's joint graph (0: its own alone)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad parameter."""
        if self.n_agents is not None:
            check_int("n_agents", self.n_agents, low=1)
        check_int("max_steps", self.max_steps, low=1)
        check_int("agent_obsk", self.agent_obsk, low=0)
        pair = (self.scenario, self.agent_conf)
        if not all(isinstance(value, str) for value in pair) or pair not in VELOCITY_THRESHOLDS:
            offered = ", ".join(f"{s} {c}" for s, c in VELOCITY_THRESHOLDS)
            raise ValueError(
                f"scenario={self.scenario!r} with agent_conf={self.agent_conf!r} has no "
                f"published velocity threshold; {NAME} offers {offered}"
            )
        if self.n_agents is not None and self.n_agents != self.agents:
            raise ValueError(
                f"n_agents={self.n_agents}: agent_conf={self.agent_conf!r} splits "
                f"{self.scenario} among {self.agents} agents"
            )

    @property
    def agents(self) -> int:
        """Number of agents of ``agent_conf``."""
        return int(self.agent_conf.split("x")[0])

    @property
    def velocity_threshold(self) -> float:
        """Safety-Gymnasium's threshold of this scenario and split."""
        return VELOCITY_THRESHOLDS[(self.scenario, self.agent_conf)]


@dataclass(frozen=True)
class VelocityCost:
    """Safety-Gymnasium's velocity cost as a cost function (:mod:`src.envs.costs`): 1 for every
    agent when the step's velocity exceeds ``threshold``, else 0."""

    threshold: float
    """Velocity above which a step costs."""
    planar: bool = True
    """Compare the planar speed (``False``: the signed x-velocity, as on Swimmer)."""

    def velocity(self, info: Mapping[str, Any]) -> float:
        """The velocity compared: Safety-Gymnasium's arithmetic on the robot's step infos."""
        x_velocity = info["x_velocity"]
        if not self.planar:
            return float(x_velocity)
        return float(np.sqrt(x_velocity**2 + info.get("y_velocity", 0) ** 2))

    def __call__(self, env: Any, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
        """The cost of every agent of the step (mamujoco gives them all the robot's infos)."""
        cost = float(self.velocity(next(iter(infos.values()))) > self.threshold)
        return dict.fromkeys(infos, cost)


def _make_mamujoco(config: MaMuJoCoConfig, render_mode: str | None) -> ParallelEnv:
    """mamujoco's ParallelEnv of ``config``, its robot's time limit at the hidden cap."""
    mujoco, parallel_env = load_mamujoco()
    if render_mode is not None:
        os.environ.setdefault("MUJOCO_GL", _DEFAULT_GL)
    with compiler_warnings(mujoco):
        return parallel_env(
            config.scenario,
            config.agent_conf,
            agent_obsk=config.agent_obsk,
            render_mode=render_mode,
            max_episode_steps=config.max_steps,
        )


class MaMuJoCoParallelEnv(CostParallelEnv):
    """mamujoco's ParallelEnv plus ``infos[agent]["cost"]`` (see the module docstring).

    The wrapped env is ``self.env``; the hidden cap is the instance attribute ``max_steps``.
    Frames are ``[480, 480, 3]`` uint8 at the robot's rate (``1 / dt`` frames per second).
    """

    def __init__(self, config: MaMuJoCoConfig, *, render_mode: str | None = None) -> None:
        check_render_mode(render_mode)
        check_config(config, MaMuJoCoConfig)
        self.config = config
        super().__init__(
            _make_mamujoco(config, render_mode),
            name=NAME,
            max_steps=config.max_steps,
            cost=VelocityCost(config.velocity_threshold, planar=config.scenario != "Swimmer"),
        )
        self.render_mode = render_mode  # mamujoco keeps it on its robot alone
        robot = self.env.single_agent_env.unwrapped
        self.metadata = {
            **self.metadata,
            "render_modes": ["rgb_array"],
            "render_fps": int(robot.metadata["render_fps"]),
            "is_parallelizable": True,
        }

    def render(self) -> np.ndarray | None:
        """An ``[H, W, 3]`` uint8 frame in ``rgb_array`` mode (``None`` without a render mode);
        a renderer that cannot start raises one line saying what it needs."""
        if self.render_mode is None:
            return super().render()
        try:
            return super().render()
        except Exception as error:  # MuJoCo's and PyOpenGL's errors have no common base
            message = " ".join(str(error).split()) or "no message"
            raise RuntimeError(
                f"env {NAME} cannot draw frames: MuJoCo's offscreen renderer failed with "
                f"MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} ({type(error).__name__}: "
                f"{message}); headless frames need EGL ({_GL_PACKAGES}), or MUJOCO_GL=osmesa "
                "with libosmesa6"
            ) from None


def _robot(env: CostParallelEnv) -> Any:
    """The Gymnasium MuJoCo env (unwrapped) inside one copy."""
    return env.env.single_agent_env.unwrapped


def _set_time_limit(env: CostParallelEnv, steps: int) -> None:
    """Set the steps counted by the robot's Gymnasium time limit (the wrapper's own counter)."""
    layer = env.env.single_agent_env
    while layer is not None:
        if hasattr(layer, "_elapsed_steps"):
            layer._elapsed_steps = steps
        layer = getattr(layer, "env", None)


class MaMuJoCoVectorEnv(ParallelVectorEnv):
    """``num_envs`` mamujoco envs behind the vector interface (``[E, A, joints]`` Box actions).

    Copy ``e`` is seeded with its own seed on a seeded reset; automatic resets continue its
    random stream. Snapshots hold each copy's MuJoCo state (the module docstring says which).
    """

    def __init__(
        self,
        config: MaMuJoCoConfig,
        *,
        num_envs: int = 1,
        seed: int | Sequence[int] | None = None,
    ) -> None:
        check_config(config, MaMuJoCoConfig)
        check_int("num_envs", num_envs, low=1)
        # rgb_array only matters when render() is called: MuJoCo's renderer starts on first use.
        super().__init__(
            lambda: MaMuJoCoParallelEnv(config, render_mode="rgb_array"),
            name=NAME,
            config=config,
            num_envs=num_envs,
            seed=seed,
            reseed_episodes=False,
        )
        self._mujoco, _ = load_mamujoco()
        self._spec = self._mujoco.mjtState.mjSTATE_INTEGRATION
        robot = _robot(self._envs[0])
        self._state_size = int(self._mujoco.mj_stateSize(robot.model, self._spec))
        self._bodies = int(robot.model.nbody)

    def get_state(self) -> dict[str, Any]:
        """Every copy's MuJoCo integration state, body positions, generator and step count."""
        require_reset(self._was_reset, "get_state")
        copies = []
        for env in self._envs:
            robot = _robot(env)
            physics = np.empty(self._state_size, dtype=np.float64)
            self._mujoco.mj_getState(robot.model, robot.data, physics, self._spec)
            copies.append(
                {
                    "physics": physics,
                    "xpos": robot.data.xpos.copy(),
                    "rng": copy.deepcopy(robot.np_random.bit_generator.state),
                }
            )
        return {
            "name": self.name,
            "config": asdict(self.config),
            "steps": self._steps.copy(),
            "copies": copies,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot into the live copies."""
        check_snapshot(
            state, name=self.name, config=self.config, shapes={"steps": (self.num_envs,)}
        )
        copies = state.get("copies")
        if not isinstance(copies, list) or len(copies) != self.num_envs:
            raise ValueError(f"state['copies'] must list {self.num_envs} copies")
        for e, saved in enumerate(copies):
            if not isinstance(saved, dict) or {"physics", "xpos", "rng"} - set(saved):
                raise ValueError(f"state['copies'][{e}] lacks physics, xpos or rng")
            shapes = {"physics": (self._state_size,), "xpos": (self._bodies, 3)}
            for key, shape in shapes.items():
                if np.shape(saved[key]) != shape:
                    raise ValueError(
                        f"state['copies'][{e}][{key!r}] has shape {np.shape(saved[key])}, "
                        f"expected {shape}"
                    )
        if not self._was_reset:
            self.reset()
        steps = np.array(state["steps"], dtype=np.int64)
        mujoco = self._mujoco
        for env, saved, count in zip(self._envs, copies, steps, strict=True):
            robot = _robot(env)
            physics = np.asarray(saved["physics"], dtype=np.float64)
            mujoco.mj_setState(robot.model, robot.data, physics, self._spec)
            # Everything derived from the restored state (frames draw it), then the state again
            # (warm start included) and the body positions the saved step had left.
            mujoco.mj_forward(robot.model, robot.data)
            mujoco.mj_setState(robot.model, robot.data, physics, self._spec)
            robot.data.xpos[:] = np.asarray(saved["xpos"], dtype=np.float64)
            robot.np_random.bit_generator.state = copy.deepcopy(saved["rng"])
            _set_time_limit(env, int(count))
            env.env.agents = list(env.possible_agents)
            env.agents, env.steps = list(env.possible_agents), int(count)
        self._steps = steps
