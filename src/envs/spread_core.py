"""The batched NumPy core of ``spread``: mpe2's ``simple_spread_v3``, all copies in arrays.

``num_envs`` copies of the task live in ``[E, ...]`` float64 arrays (agent positions and
velocities, landmark positions); one :meth:`NativeSpreadVectorEnv.step` advances every copy with
a fixed number of array operations. The task is mpe2's, step for step and seed for seed: for
the same seed and the same actions, observations, rewards, truncations and collisions equal those
of ``simple_spread_v3`` with the same ``N``, ``local_ratio``, ``max_cycles`` and
``continuous_actions`` (the floating-point operations are mpe2's, in mpe2's order).

The task, as mpe2 defines it (``N`` agents, ``N`` landmarks, 2-d world):

1. Reset: each copy draws, from its own ``np.random.Generator`` (PCG64 seeded through
   ``SeedSequence(seed)``, as Gymnasium's ``seeding.np_random`` does), ``uniform(-1, 1)`` x and
   y for agent 0, 1, ..., then for landmark 0, 1, ...; velocities are zero. An unseeded reset
   continues the copy's stream, so auto-resets follow the copy's own random stream.
   With ``spawn="separated"`` (not mpe2's: see :class:`SpreadConfig`) a copy draws this whole
   block again, from the same stream, while two agents are closer than the collision distance.
2. Actions: discrete 0 no-op, 1 ``-x``, 2 ``+x``, 3 ``-y``, 4 ``+y`` give a control of
   magnitude 5 (mpe2's sensitivity); continuous actions are 5 numbers in [0, 1] (clipped) and
   give ``u = 5 * (a[2] - a[1], a[4] - a[3])``.
3. Forces: the control plus, from every other agent ``j`` in agent order, the soft contact
   force ``100 * d / |d| * 1e-3 * log(1 + exp((0.3 - |d|) / 1e-3))`` with ``d = p_i - p_j``
   (agents have size 0.15; landmarks never collide). Unit mass, no speed limit.
4. Integration (dt 0.1, damping 0.25): ``p += v * dt``, then ``v = v * 0.75 + F * dt``.
5. Reward of agent i: ``(1 - local_ratio) * global + local_ratio * local`` with ``global`` minus
   the sum over landmarks of the distance to the nearest agent and ``local`` minus the number of
   other agents closer than 0.3 (a collision). The cost of an agent is 1 if it collides with at
   least one other agent at that step.
6. Observation of agent i (float32, ``6 N`` values): own velocity, own position, every
   landmark's position relative to it, every other agent's relative position (agent order),
   then ``2 (N - 1)`` zeros (the silent agents' communication).
7. Episodes are truncated after ``max_steps`` steps (mpe2's ``max_cycles``); never terminated.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from src.envs.base import (
    StepResult,
    VectorEnv,
    check_actions,
    check_config,
    check_int,
    check_probability,
    check_snapshot,
    first_reset_seeds,
    require_reset,
    resolve_seeds,
)
from src.envs.rendering import paint_disc

__all__ = [
    "ACTION_WIDTH",
    "CAPTURE_RADIUS",
    "COLLISION_DISTANCE",
    "CONTACT_FORCE",
    "CONTACT_MARGIN",
    "DAMPING",
    "DISCRETE_CONTROLS",
    "DT",
    "SPAWNS",
    "NativeSpreadVectorEnv",
    "SpreadConfig",
    "check_continuous_actions",
    "draw_spread",
]

# mpe2's constants (World, Agent, Landmark, SimpleEnv._set_action, Scenario.make_world).
_DT = 0.1
_DAMPING = 0.25
_CONTACT_FORCE = 1e2
_CONTACT_MARGIN = 1e-3
_SENSITIVITY = 5.0
AGENT_SIZE = 0.15
LANDMARK_SIZE = 0.05
_COLLISION_DISTANCE = AGENT_SIZE + AGENT_SIZE  # both in contact forces and in collisions
_CAPTURE_RADIUS = 0.1  # a landmark counts as occupied in benchmark_data below this distance
ACTION_WIDTH = 5
"""Number of action entries: the discrete actions, or the width of a continuous action."""
# Controls of the discrete actions: no-op, -x, +x, -y, +y, times the sensitivity.
_DISCRETE_U = _SENSITIVITY * np.array(
    [[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]], dtype=np.float64
)
SPAWNS = ("mpe2", "separated")
"""Values of :attr:`SpreadConfig.spawn`."""
# Public names of the task's constants, for the centralised teams of src.envs.witness.
DT = _DT
"""Time step of the integration."""
DAMPING = _DAMPING
"""Share of the velocity lost every step."""
CONTACT_FORCE = _CONTACT_FORCE
"""Scale of the soft contact force between agents."""
CONTACT_MARGIN = _CONTACT_MARGIN
"""Softness of the contact force."""
COLLISION_DISTANCE = _COLLISION_DISTANCE
"""Centre distance below which two agents collide (and cost): they overlap."""
CAPTURE_RADIUS = _CAPTURE_RADIUS
"""A landmark is covered (mpe2's ``occupied_landmarks``) by an agent closer than this."""
DISCRETE_CONTROLS = _DISCRETE_U
"""``[5, 2]`` control of each discrete action: no-op, -x, +x, -y, +y (times the sensitivity)."""
# next_double of NumPy's PCG64: the top 53 bits of a raw 64-bit output times 2**-53.
_DOUBLE_SHIFT = np.uint64(11)
_DOUBLE_SCALE = 1.0 / 9007199254740992.0
_MASK64 = (1 << 64) - 1

# Rendering, after mpe2's SimpleEnv.draw: 700 x 700 pixels, entity colour * 200.
FRAME_SIZE = 700
AGENT_COLOUR = np.array([70, 70, 170], dtype=np.uint8)
LANDMARK_COLOUR = np.array([50, 50, 50], dtype=np.uint8)
BORDER_COLOUR = np.array([0, 0, 0], dtype=np.uint8)
COLLISION_COLOUR = np.array([220, 20, 20], dtype=np.uint8)
_PIXELS_PER_SIZE = 350  # mpe2's scale from entity size to pixel radius
_COLLISION_RING = (2, 6)  # red ring around colliding agents, pixels outside the border


@dataclass(frozen=True, kw_only=True)
class SpreadConfig:
    """Parameters of ``spread`` (native) and ``spread_mpe2``: ``simple_spread_v3``'s own.

    Both envs share this class, so a value mpe2 does not support is rejected by both with the
    same message naming the parameter.
    """

    n_agents: int = 3
    """Number of agents (and landmarks), mpe2's ``N``."""
    max_steps: int = 25
    """Hidden episode cap, mpe2's ``max_cycles``."""
    local_ratio: float = 0.5
    """Weight of the local (collision) reward against the global (coverage) reward."""
    continuous_actions: bool = False
    """Actions are 5 numbers in [0, 1] per agent instead of one of 5 discrete actions."""
    spawn: str = "mpe2"
    """How a layout is drawn at reset. ``mpe2``: every agent and landmark uniformly in
    [-1, 1]^2, independently, as mpe2 does (two agents may spawn overlapping, and then collide at
    step 1 whatever they do). ``separated``: mpe2's layout, drawn again (agents and landmarks,
    from the copy's own stream) while two agents are closer than the collision distance (0.3):
    a layout mpe2 spawns apart is kept as it is, and layouts follow mpe2's distribution
    conditioned on no agent starting in a collision. Only the native ``spread`` has
    ``separated``; ``spread_mpe2`` spawns as mpe2 does."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad parameter."""
        check_int("n_agents", self.n_agents, low=1)
        check_int("max_steps", self.max_steps, low=1)
        check_probability("local_ratio", self.local_ratio)
        if not isinstance(self.continuous_actions, bool):
            raise ValueError(f"continuous_actions must be a bool, got {self.continuous_actions!r}")
        if not isinstance(self.spawn, str) or self.spawn not in SPAWNS:
            raise ValueError(f"spawn must be one of {', '.join(SPAWNS)}, got {self.spawn!r}")


def check_continuous_actions(actions: Any, num_envs: int, n_agents: int) -> np.ndarray:
    """Return continuous ``actions [E, A, 5]`` clipped to [0, 1], or raise naming the problem.

    float32 and float64 arrays keep their dtype: mpe2 computes the controls in the dtype it is
    given (its action space is float32), so keeping it keeps the results identical.
    """
    array = np.asarray(actions)
    shape = (num_envs, n_agents, ACTION_WIDTH)
    if array.shape != shape:
        raise ValueError(
            f"actions must have shape [E, A, {ACTION_WIDTH}] = {shape}, got {array.shape}"
        )
    if array.dtype not in (np.float32, np.float64):
        raise ValueError(f"continuous actions must be float32 or float64, got dtype {array.dtype}")
    if not np.isfinite(array).all():
        raise ValueError("continuous actions must be finite numbers")
    return np.clip(array, 0.0, 1.0)


def _rng_words(bit_generator: np.random.PCG64) -> list[int]:
    """A PCG64 state as six uint64 words: state (high, low), inc (high, low), uint32 buffer."""
    state = bit_generator.state
    words = state["state"]
    return [
        words["state"] >> 64,
        words["state"] & _MASK64,
        words["inc"] >> 64,
        words["inc"] & _MASK64,
        int(state["has_uint32"]),
        int(state["uinteger"]),
    ]


def _rng_from_words(words: Sequence[int]) -> np.random.PCG64:
    """The PCG64 bit generator whose state :func:`_rng_words` gave ``words``."""
    state_hi, state_lo, inc_hi, inc_lo, has_uint32, uinteger = (int(w) for w in words)
    bit_generator = np.random.PCG64()
    bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (state_hi << 64) | state_lo, "inc": (inc_hi << 64) | inc_lo},
        "has_uint32": has_uint32,
        "uinteger": uinteger,
    }
    return bit_generator


class NativeSpreadVectorEnv(VectorEnv):
    """Batched ``spread``: ``num_envs`` copies of ``simple_spread_v3``; see the module docstring.

    Discrete actions are integers ``[E, A]`` in ``[0, 5)``; with ``continuous_actions`` they are
    floats ``[E, A, 5]`` (float32 or float64), clipped to [0, 1] as mpe2 does.
    """

    name = "spread"
    n_actions = ACTION_WIDTH

    def __init__(
        self,
        config: SpreadConfig,
        *,
        num_envs: int = 1,
        seed: int | Sequence[int] | None = None,
        autoreset: bool = True,
    ) -> None:
        check_config(config, SpreadConfig)
        check_int("num_envs", num_envs, low=1)
        self.config = config
        self.num_envs = num_envs
        n = config.n_agents
        self.n_agents = n
        self.agents = [f"agent_{i}" for i in range(n)]
        self.max_steps = config.max_steps
        self.continuous_actions = bool(config.continuous_actions)
        self.action_shape: tuple[int, ...] = (ACTION_WIDTH,) if self.continuous_actions else ()
        self.obs_dim = 6 * n
        self.state_dim = n * self.obs_dim
        self.autoreset = autoreset
        self._initial_seeds = resolve_seeds(seed, num_envs)
        self._local_ratio = float(config.local_ratio)
        self._global_ratio = 1 - self._local_ratio
        # others[i] lists the other agents in agent order (mpe2's order of contact forces).
        self._others = np.array(
            [[j for j in range(n) if j != i] for i in range(n)], dtype=np.int64
        ).reshape(n, n - 1)
        shape = (num_envs, n, 2)
        self._pos = np.zeros(shape)
        self._vel = np.zeros(shape)
        self._landmarks = np.zeros(shape)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._cam_range = np.ones(num_envs)
        self._finished = np.zeros(num_envs, dtype=bool)
        self._rngs: list[np.random.PCG64] | None = None
        # Float64 details of the last step (rewards, collision counts, nearest-agent distance of
        # every landmark), for the ParallelEnv view's exact rewards and mpe2's benchmark_data.
        self.last_reward = np.zeros((num_envs, n))
        self.last_collisions = np.zeros((num_envs, n), dtype=np.int64)
        self.last_min_dists = np.zeros((num_envs, n))

    # ------------------------------------------------------------------ episode control

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray:
        """Start a new episode in every copy; returns obs ``[E, A, D]`` float32."""
        seeds = first_reset_seeds(
            seed, self.num_envs, initial=self._initial_seeds, started=self._rngs is not None
        )
        if seeds is not None:
            # Gymnasium's seeding.np_random(seed): PCG64 seeded through SeedSequence(seed).
            self._rngs = [np.random.PCG64(np.random.SeedSequence(s)) for s in seeds]
        self._reset_rows(np.arange(self.num_envs))
        return self.observe()

    def _reset_rows(self, idx: np.ndarray) -> None:
        assert self._rngs is not None
        n = self.n_agents
        rows = idx.tolist()
        # mpe2: x and y of every agent, then of every landmark, in one block per copy.
        xy = self._uniform_points(rows, 2 * n)
        if self.config.spawn == "separated":
            # Only the copies whose agents overlap draw again, each from its own stream, so a
            # copy's layout depends on its stream alone.
            pending = np.flatnonzero(self._overlapping(xy[:, :n]))
            while pending.size:
                xy[pending] = self._uniform_points([rows[r] for r in pending], 2 * n)
                pending = pending[self._overlapping(xy[pending, :n])]
        self._pos[idx] = xy[:, :n]
        self._landmarks[idx] = xy[:, n:]
        self._vel[idx] = 0.0
        self._steps[idx] = 0
        self._finished[idx] = False
        # mpe2 keeps the camera range of the episode start for its zoom (rendering only).
        self._cam_range[idx] = np.abs(xy).max(axis=(1, 2))

    def _uniform_points(self, rows: list[int], points: int) -> np.ndarray:
        """``[R, points, 2]`` x and y ``uniform(-1, 1)`` drawn in turn from each copy's stream."""
        assert self._rngs is not None
        draws = 2 * points
        raw = np.empty((len(rows), draws), dtype=np.uint64)
        rngs = self._rngs
        for row, e in enumerate(rows):
            raw[row] = rngs[e].random_raw(draws)
        # Generator.uniform(-1, 1) is -1 + 2 * next_double, the same operations here.
        return (-1.0 + 2.0 * ((raw >> _DOUBLE_SHIFT) * _DOUBLE_SCALE)).reshape(len(rows), points, 2)

    def _overlapping(self, pos: np.ndarray) -> np.ndarray:
        """``[R]`` bool: two agents of positions ``pos`` ``[R, A, 2]`` would collide (the
        distances computed as the step computes them)."""
        rel = pos[:, self._others, :] - pos[:, :, None, :]
        dist = np.sqrt(rel[..., 0] * rel[..., 0] + rel[..., 1] * rel[..., 1])
        return (dist < _COLLISION_DISTANCE).any(axis=(1, 2))

    def _controls(self, actions: Any) -> np.ndarray:
        """Control forces ``[E, A, 2]`` float64 of checked actions, computed as mpe2 does."""
        if self.continuous_actions:
            act = check_continuous_actions(actions, self.num_envs, self.n_agents)
            u = np.empty((self.num_envs, self.n_agents, 2))
            # The differences in the actions' own dtype, then float64, then the sensitivity.
            u[:, :, 0] = act[:, :, 2] - act[:, :, 1]
            u[:, :, 1] = act[:, :, 4] - act[:, :, 3]
            u *= _SENSITIVITY
            return u
        act = check_actions(actions, self.num_envs, self.n_agents, ACTION_WIDTH)
        return _DISCRETE_U[act]

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every copy by one step; finished copies reset if ``autoreset``."""
        require_reset(self._rngs is not None, "step")
        if self._finished.any():
            raise RuntimeError(
                "an episode has ended in a copy without autoreset; call reset() first"
            )
        force = self._controls(actions)
        pos, vel = self._pos, self._vel
        others = self._others

        if self.n_agents > 1:
            # Contact force on agent i from agent j: d = p_i - p_j. mpe2 computes the pair once
            # (for i < j) and negates it for j; negation is exact, so this is the same number.
            delta = pos[:, :, None, :] - pos[:, others, :]  # [E, A, A-1, 2]
            dist = np.sqrt(delta[..., 0] * delta[..., 0] + delta[..., 1] * delta[..., 1])
            penetration = np.logaddexp(0.0, (_COLLISION_DISTANCE - dist) / _CONTACT_MARGIN)
            penetration *= _CONTACT_MARGIN
            pair = _CONTACT_FORCE * delta
            pair /= dist[..., None]
            pair *= penetration[..., None]
            # mpe2 adds the pair forces to the control one by one, other agents in agent order.
            for k in range(self.n_agents - 1):
                force += pair[:, :, k]

        # Integration: position with the old velocity, then damping, then the force (mass 1).
        pos = pos + vel * _DT
        vel = vel * (1 - _DAMPING)
        vel += force * _DT
        self._pos, self._vel = pos, vel

        landmarks = self._landmarks
        rel_landmarks = landmarks[:, None, :, :] - pos[:, :, None, :]  # [E, A, L, 2]
        rel_others = pos[:, others, :] - pos[:, :, None, :]  # [E, A, A-1, 2]
        lm_dist = np.sqrt(
            rel_landmarks[..., 0] * rel_landmarks[..., 0]
            + rel_landmarks[..., 1] * rel_landmarks[..., 1]
        )
        min_dists = lm_dist.min(axis=1)  # [E, L]: nearest agent of every landmark
        global_reward = -min_dists[:, 0]
        for landmark in range(1, self.n_agents):
            global_reward = global_reward - min_dists[:, landmark]
        other_dist = np.sqrt(
            rel_others[..., 0] * rel_others[..., 0] + rel_others[..., 1] * rel_others[..., 1]
        )
        collisions = (other_dist < _COLLISION_DISTANCE).sum(axis=2)  # [E, A]
        reward64 = global_reward[:, None] * self._global_ratio - collisions * self._local_ratio
        self.last_reward, self.last_collisions, self.last_min_dists = (
            reward64,
            collisions,
            min_dists,
        )

        self._steps += 1
        truncated = self._steps >= self.max_steps  # [E]; spread never terminates
        episode_step = self._steps.copy()
        final_obs = self._observe(vel, pos, rel_landmarks, rel_others)
        obs = final_obs.copy()
        if truncated.any():
            if self.autoreset:
                idx = np.flatnonzero(truncated)
                self._reset_rows(idx)
                obs[idx] = self._observe_rows(idx)
            else:
                self._finished = truncated
        shape = (self.num_envs, self.n_agents)
        return StepResult(
            obs=obs,
            reward=reward64.astype(np.float32),
            cost=(collisions > 0).astype(np.float32),
            terminated=np.zeros(shape, dtype=bool),
            truncated=np.repeat(truncated[:, None], self.n_agents, axis=1),
            final_obs=final_obs,
            episode_step=episode_step,
            collision=collisions > 0,  # every cost of spread is a collision
        )

    # ------------------------------------------------------------------ observations

    def _observe(
        self,
        vel: np.ndarray,
        pos: np.ndarray,
        rel_landmarks: np.ndarray,
        rel_others: np.ndarray,
    ) -> np.ndarray:
        """Observations ``[R, A, D]`` float32 from float64 parts (mpe2 casts at the end too)."""
        n_rows, n = pos.shape[:2]
        obs = np.zeros((n_rows, n, self.obs_dim), dtype=np.float32)
        obs[:, :, 0:2] = vel
        obs[:, :, 2:4] = pos
        obs[:, :, 4 : 4 + 2 * n] = rel_landmarks.reshape(n_rows, n, 2 * n)
        obs[:, :, 4 + 2 * n : 2 + 4 * n] = rel_others.reshape(n_rows, n, 2 * (n - 1))
        return obs  # the last 2 (N - 1) entries stay 0: silent agents' communication

    def _observe_rows(self, idx: np.ndarray) -> np.ndarray:
        pos = self._pos[idx]
        others = self._others
        return self._observe(
            self._vel[idx],
            pos,
            self._landmarks[idx][:, None, :, :] - pos[:, :, None, :],
            pos[:, others, :] - pos[:, :, None, :],
        )

    def observe(self) -> np.ndarray:
        """Observations ``[E, A, D]`` of the current state (as ``reset``/``step`` return them)."""
        return self._observe_rows(np.arange(self.num_envs))

    def global_state(self) -> np.ndarray:
        """Global state ``[E, A * D]`` float32: every agent's observation in agent order.

        This is mpe2's ``state()``.
        """
        return self.observe().reshape(self.num_envs, self.state_dim)

    def colliding(self) -> np.ndarray:
        """``[E, A]`` bool: agents overlapping at least one other agent now."""
        pos = self._pos
        rel = pos[:, self._others, :] - pos[:, :, None, :]
        dist = np.sqrt(rel[..., 0] * rel[..., 0] + rel[..., 1] * rel[..., 1])
        return (dist < _COLLISION_DISTANCE).any(axis=2)

    def benchmark_data(self, index: int) -> list[tuple[float, int, float, int]]:
        """mpe2's ``benchmark_data`` of copy ``index`` after the last step, one tuple per agent.

        ``(reward, collisions, min_dists, occupied_landmarks)``: minus the summed nearest-agent
        distances of the landmarks minus the agent's collisions, its number of collisions, the
        summed distances, and the landmarks with an agent closer than 0.1.
        """
        check_int("index", index, low=0, high=self.num_envs - 1)
        min_dists = self.last_min_dists[index].tolist()
        negative = 0.0
        total = 0.0
        for value in min_dists:  # mpe2's accumulation order
            negative -= value
            total += value
        occupied = sum(value < _CAPTURE_RADIUS for value in min_dists)
        rows = []
        for count in self.last_collisions[index].tolist():
            reward = negative
            for _ in range(count):
                reward -= 1
            rows.append((reward, int(count), total, int(occupied)))
        return rows

    # ------------------------------------------------------------------ state and rendering

    def get_state(self) -> dict[str, Any]:
        """Copies of every array that determines the future, and each copy's PCG64 state.

        Only arrays and plain values: ``rng`` holds the six uint64 words of each copy's
        generator (state and increment as high and low halves, then the uint32 buffer).
        """
        require_reset(self._rngs is not None, "get_state")
        return {
            "name": self.name,
            "config": asdict(self.config),
            "pos": self._pos.copy(),
            "vel": self._vel.copy(),
            "landmarks": self._landmarks.copy(),
            "steps": self._steps.copy(),
            "cam_range": self._cam_range.copy(),
            "rng": np.array([_rng_words(rng) for rng in self._rngs], dtype=np.uint64),
            "finished": self._finished.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot (arrays are copied in)."""
        e, n = self.num_envs, self.n_agents
        shapes = {
            "pos": (e, n, 2),
            "vel": (e, n, 2),
            "landmarks": (e, n, 2),
            "steps": (e,),
            "cam_range": (e,),
            "rng": (e, 6),
            "finished": (e,),
        }
        check_snapshot(state, name=self.name, config=self.config, shapes=shapes)
        raw = state["rng"]
        # Python lists (from JSON) are read as they are: NumPy would turn words >= 2**63 into
        # floats.
        words = raw.tolist() if isinstance(raw, np.ndarray) else [list(row) for row in raw]
        if not all(
            isinstance(w, numbers.Integral) and not isinstance(w, bool) and 0 <= w <= _MASK64
            for row in words
            for w in row
        ):
            raise ValueError("state['rng'] must hold unsigned 64-bit integers")
        self._rngs = [_rng_from_words(row) for row in words]
        self._pos = np.array(state["pos"], dtype=np.float64)
        self._vel = np.array(state["vel"], dtype=np.float64)
        self._landmarks = np.array(state["landmarks"], dtype=np.float64)
        self._steps = np.array(state["steps"], dtype=np.int64)
        self._cam_range = np.array(state["cam_range"], dtype=np.float64)
        self._finished = np.array(state["finished"], dtype=bool)

    def render(self, index: int = 0) -> np.ndarray:
        """``[700, 700, 3]`` uint8 frame of copy ``index``, drawn as mpe2 draws it.

        Colliding agents get a red ring.
        """
        check_int("index", index, low=0, high=self.num_envs - 1)
        require_reset(self._rngs is not None, "render")
        pos = self._pos[index]
        rel = pos[self._others] - pos[:, None, :]
        colliding = (np.sqrt((rel * rel).sum(axis=2)) < _COLLISION_DISTANCE).any(axis=1)
        return draw_spread(
            agents=pos,
            landmarks=self._landmarks[index],
            cam_range0=float(self._cam_range[index]),
            colliding=colliding,
        )


def draw_spread(
    *,
    agents: np.ndarray,
    landmarks: np.ndarray,
    cam_range0: float,
    colliding: np.ndarray,
    size: int = FRAME_SIZE,
) -> np.ndarray:
    """Draw one copy as mpe2 does, into a fresh ``[size, size, 3]`` uint8 frame.

    White background; agents, then landmarks, as filled discs with a black border in mpe2's
    colours and places: the camera spans the farthest entity, zoomed by ``0.9 * cam_range0 /
    cam_range`` (mpe2's dynamic rescaling, ``cam_range0`` being the range at the episode start).
    Agents in ``colliding`` get a red ring around them.
    """
    frame = np.full((size, size, 3), 255, dtype=np.uint8)
    entities = np.concatenate([agents, landmarks], axis=0)
    cam_range = float(np.abs(entities).max())
    if cam_range <= 0.0:
        cam_range = 1.0
    zoom = 0.9 * cam_range0 / cam_range
    half = size // 2
    # mpe2: x = (x / cam_range) * width // 2 * 0.9 + width // 2, y flipped.
    xs = np.floor_divide(entities[:, 0] / cam_range * size, 2) * 0.9 + half
    ys = np.floor_divide(-entities[:, 1] / cam_range * size, 2) * 0.9 + half
    # pygame truncates centres and radii to whole pixels.
    xs, ys = xs.astype(np.int64).tolist(), ys.astype(np.int64).tolist()
    n = len(agents)
    agent_radius = int(AGENT_SIZE * _PIXELS_PER_SIZE * zoom)
    landmark_radius = int(LANDMARK_SIZE * _PIXELS_PER_SIZE * zoom)
    for k in range(len(entities)):
        radius = agent_radius if k < n else landmark_radius
        paint_disc(frame, xs[k], ys[k], radius, AGENT_COLOUR if k < n else LANDMARK_COLOUR)
        paint_disc(frame, xs[k], ys[k], radius, BORDER_COLOUR, inner=radius - 1)
    inner, outer = _COLLISION_RING
    for k in np.flatnonzero(colliding).tolist():
        paint_disc(
            frame, xs[k], ys[k], agent_radius + outer, COLLISION_COLOUR, inner=agent_radius + inner
        )
    return frame
