"""Diagnostics of a trained shield: is its calibrated risk estimate right?

For the shield (`src.algos.shield.budget`), `certified_plan_risk` is its calibrated risk
estimate U of a joint action (not a certified risk, despite the name), and two true risks of
the same action in the real env go with it:
`true_deployed_risk` (the team then keeps acting with a given policy, e.g. the deployed
shielded one: what the shield's calibration is fitted to) and `true_plan_risk` (the team then
follows the models' safest joint action, the backup the models' own risk q assumes).

The real-dynamics estimates need a native task whose state can be cloned (`clone_env`): the
grid tasks (`hazard_grid`, `intersection`), whose state carries one random stream key per copy,
and `spread`, whose steps are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from src.algos.shield.search import joint_actions

__all__ = [
    "backup_actions",
    "certified_plan_risk",
    "clone_env",
    "true_deployed_risk",
    "true_plan_risk",
]

BACKUP_BLOCK_ROWS = 2048
"""(state, joint action) rows `backup_actions` judges per call of the shield's models."""


def clone_env(env: Any, index: np.ndarray, *, seed: int) -> Any:
    """A vector env of the native tasks whose copy j is env's copy `index[j]`: on the grid
    tasks with a fresh random stream per clone (so the clones' slips are independent draws);
    on `spread`, whose steps draw nothing (its per-copy stream only places the next reset),
    with the copy's own stream, so a clone's future is the copy's under the same actions."""
    state = env.get_state()
    if "config" not in state or not ("keys" in state or "rng" in state):
        raise ValueError(f"cloning needs a native grid or spread env, got {type(env).__name__}")
    index = np.asarray(index, dtype=np.int64)
    e = env.num_envs
    clone = {
        k: (np.asarray(v)[index] if isinstance(v, np.ndarray) and v.shape[:1] == (e,) else v)
        for k, v in state.items()
    }
    if "keys" in state:
        rng = np.random.default_rng(seed)
        clone["keys"] = rng.integers(0, 2**63, size=len(index), dtype=np.int64).astype(np.uint64)
    clone["finished"] = np.zeros(len(index), dtype=bool)
    sim = type(env)(env.config, num_envs=len(index), seed=0)
    sim.reset()
    sim.set_state(clone)
    return sim


def backup_actions(shield: Any, obs: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """The shield's safest joint action [N, A] for observations [N, A, D] with `remaining`
    [N] steps of its horizon left (the backup it certifies against).

    Every joint action is judged once per distinct (observation, remaining) row: clones of one
    state that have not drifted apart share their models' call.
    """
    n, a, d = obs.shape
    if n == 0:
        return np.zeros((0, a), dtype=np.int64)
    rows = np.concatenate(
        [
            np.asarray(obs, dtype=np.float32).reshape(n, a * d),
            np.asarray(remaining, dtype=np.float32).reshape(n, 1),
        ],
        axis=1,
    )
    distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    every = joint_actions(shield.n_agents, shield.n_actions)  # [K, A]
    k = every.shape[0]
    # Blocks of about BACKUP_BLOCK_ROWS judged rows: small batches run faster than one huge one.
    block = max(1, BACKUP_BLOCK_ROWS // k)
    picks = []
    with torch.inference_mode():
        for start in range(0, len(distinct), block):
            part = distinct[start : start + block]
            u = len(part)
            joint = torch.from_numpy(np.ascontiguousarray(part[:, :-1]))
            left = torch.from_numpy(np.ascontiguousarray(part[:, -1]))
            risks = shield.certified(
                joint.repeat_interleave(k, dim=0),
                every.repeat(u, 1),
                left.repeat_interleave(k),
            ).view(u, k)
            picks.append(risks.argmin(dim=1))
    return every[torch.cat(picks)].numpy()[inverse.reshape(-1)]


def true_plan_risk(
    env: Any,
    shield: Any,
    first: np.ndarray,
    *,
    horizon: int | np.ndarray,
    rollouts: int,
    seed: int,
) -> np.ndarray:
    """True P(violation within horizon[e] steps) [E] of copy e of `env` taking joint action
    first[e] [E, A] now and the shield's backup after it, by Monte Carlo of the real env
    (`rollouts` clones per copy). `horizon`: one number of steps for every copy, or one per
    copy [E]. `env` is not changed."""
    e = env.num_envs
    window = np.repeat(_per_copy("horizon", horizon, e), rollouts)
    sim = clone_env(env, np.repeat(np.arange(e), rollouts), seed=seed)

    def backup(result: Any, alive: np.ndarray, ended: np.ndarray, depth: int) -> np.ndarray:
        # Clones that no longer count keep stepping (auto-reset) and stay put.
        live = np.flatnonzero(alive)
        actions = np.zeros((len(window), shield.n_agents), dtype=np.int64)
        actions[live] = backup_actions(shield, result.final_obs[live], window[live] - depth - 1)
        return actions

    return _violated_within(sim, first, window, backup).reshape(e, rollouts).mean(axis=1)


def _violated_within(
    sim: Any,
    first: np.ndarray,
    window: np.ndarray,
    next_actions: Callable[[Any, np.ndarray, np.ndarray, int], np.ndarray],
) -> np.ndarray:
    """Step the clones `sim` with `first` [E, A] (already repeated per clone), then with
    `next_actions(result, alive, ended, depth)`, until every clone's `window` [E] of steps has
    passed, its episode ended or it violated; whether each clone violated in its window. The
    clones are closed."""
    rows = len(window)
    actions = np.repeat(np.asarray(first, dtype=np.int64), rows // len(first), axis=0)
    alive = window > 0
    violated = np.zeros(rows, dtype=bool)
    for depth in range(int(window.max(initial=0))):
        result = sim.step(actions)
        violated |= alive & (np.asarray(result.cost) > 0).any(axis=1)
        ended = np.asarray(result.terminated).any(axis=1) | np.asarray(result.truncated).any(axis=1)
        alive &= ~ended & ~violated & (depth + 1 < window)
        if not alive.any():
            break
        actions = next_actions(result, alive, ended, depth)
    sim.close()
    return violated


def true_deployed_risk(
    env: Any,
    follower: Any,
    first: np.ndarray,
    *,
    horizon: int | np.ndarray,
    episode_step: np.ndarray,
    rollouts: int,
    seed: int,
    follower_seed: int,
) -> np.ndarray:
    """True P(violation within horizon[e] steps) [E] of copy e of `env` taking joint action
    first[e] [E, A] now and then acting with `follower` (e.g. the deployed shielded policy,
    `src.algos.policy.Actor`), by Monte Carlo of the real env: `rollouts` clones per copy, all
    driven by `follower`, reset for them with `follower_seed`.

    `horizon`: steps counted, this one included (one number, or one per copy [E]); a violation
    in any of them counts, an episode that ends first does not. `episode_step` [E]: the
    1-based step of `first` in its episode (the follower acts from the next one). `env` is not
    changed.
    """
    e = env.num_envs
    window = np.repeat(_per_copy("horizon", horizon, e), rollouts)
    step = np.repeat(np.asarray(episode_step, dtype=np.int64).reshape(e), rollouts)
    sim = clone_env(env, np.repeat(np.arange(e), rollouts), seed=seed)
    follower.reset(len(window), follower_seed)

    def follow(result: Any, alive: np.ndarray, ended: np.ndarray, depth: int) -> np.ndarray:
        # Every clone keeps acting (the follower's batch is fixed); only the live ones count.
        nonlocal step
        step = np.where(ended, 1, step + 1)
        return np.asarray(follower.act(result.obs, step), dtype=np.int64)

    return _violated_within(sim, first, window, follow).reshape(e, rollouts).mean(axis=1)


def certified_plan_risk(
    shield: Any, obs: np.ndarray, first: np.ndarray, *, horizon: int | np.ndarray
) -> np.ndarray:
    """The shield's calibrated risk U [N] of `first` [N, A] at obs [N, A, D] over `horizon`
    steps (one number, or one per row [N]): g(q) of the action then the models' safest
    continuation, as the shield reports it for an executed action (`Decision.bound`)."""
    n, a, d = obs.shape
    left = _per_copy("horizon", horizon, n).astype(np.float32)
    with torch.inference_mode():
        joint = torch.from_numpy(np.asarray(obs, dtype=np.float32).reshape(n, a * d))
        return shield.certified(
            joint, torch.from_numpy(np.asarray(first, dtype=np.int64)), torch.from_numpy(left)
        ).numpy()


def _per_copy(name: str, value: int | np.ndarray, n: int) -> np.ndarray:
    """`value` as one int64 per copy [n] (a number is repeated)."""
    array = np.asarray(value, dtype=np.int64)
    if array.ndim == 0:
        return np.full(n, int(array), dtype=np.int64)
    if array.shape != (n,):
        raise ValueError(f"{name} must be a number or have shape ({n},), got {array.shape}")
    return array
