"""Diagnostics of a trained shield: is its cost model calibrated, are its risk estimates right?

Two measurements, both against ground truth:

- `cost_calibration`: the world model's per-agent cost probabilities on the held-out part of the
  replay (real transitions it never trained on) against the real costs: Brier score, the Brier
  score of the constant base rate, and a reliability table. This only covers the actions that
  were executed, i.e. mostly the ones the policy prefers.
- `true_lookahead_risk` vs `model_lookahead_risk`: for every (copy, agent, candidate action) of
  the current env state, the probability that the agent's cost is > 0 within L steps when it
  takes the candidate first and then follows its policy while the others follow theirs (the
  shield's definition of a candidate's risk), by Monte Carlo of the *real* dynamics (the env is
  cloned through `get_state`/`set_state` with fresh random streams), and the same probability as
  the shield's imagination estimates it (k / K). This covers every candidate, including the
  counterfactual ones the replay rarely holds.

For the v1 shield (`src.algos.shield.budget`), `certified_plan_risk` is its calibrated risk
estimate U of a joint action (not a certified risk, despite the name), and two true risks of
the same action in the real env go with it:
`true_deployed_risk` (the team then keeps acting with a given policy, e.g. the deployed
shielded one: what the shield's calibration is fitted to) and `true_plan_risk` (the team then
follows the models' safest joint action, the backup the models' own risk q assumes).

The real-dynamics estimates need a native grid task (`hazard_grid`, `intersection`), whose state
carries one random stream key per copy.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from src.algos.shield.replay import TransitionReplay
from src.algos.shield.shield import Shield
from src.algos.shield.world_model import EnsembleWorldModel

__all__ = [
    "backup_actions",
    "certified_plan_risk",
    "clone_env",
    "cost_calibration",
    "model_lookahead_risk",
    "risk_summary",
    "sample_actor_actions",
    "true_deployed_risk",
    "true_lookahead_risk",
    "true_plan_risk",
]

DEFAULT_BINS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
BACKUP_BLOCK_ROWS = 2048
"""(state, joint action) rows `backup_actions` judges per call of the shield's models."""


def cost_calibration(
    world_model: EnsembleWorldModel,
    replay: TransitionReplay,
    *,
    max_rows: int = 4096,
    bins: tuple[float, ...] = DEFAULT_BINS,
) -> dict[str, Any]:
    """Calibration of the ensemble-mean cost probability on the latest validation rows.

    Returns n (agent-steps), base_rate, mean_predicted, brier, brier_base_rate (the Brier
    score of always predicting the base rate) and `reliability`: one row per non-empty bin
    [low, high) with count, mean predicted and observed rate (the last bin includes 1).
    """
    if replay.valid.size == 0:
        raise ValueError("the replay holds no validation rows to score")
    if len(bins) < 2 or any(b <= a for a, b in itertools.pairwise(bins)):
        raise ValueError(f"bins must be increasing edges, got {bins}")
    valid = replay.valid.latest(max_rows)
    members = world_model.ensemble_size
    with torch.no_grad():
        rows = {k: v.unsqueeze(0).expand(members, *v.shape) for k, v in valid.items()}
        _, cost_prob = world_model._losses(rows)
    predicted = cost_prob.mean(dim=0).reshape(-1).numpy().astype(np.float64)
    observed = valid["cost"].reshape(-1).numpy().astype(np.float64)
    base = float(observed.mean())
    table = []
    edges = np.asarray(bins, dtype=np.float64)
    index = np.clip(np.searchsorted(edges, predicted, side="right") - 1, 0, len(edges) - 2)
    for i in range(len(edges) - 1):
        mask = index == i
        if mask.any():
            table.append(
                {
                    "low": float(edges[i]),
                    "high": float(edges[i + 1]),
                    "count": int(mask.sum()),
                    "mean_predicted": float(predicted[mask].mean()),
                    "observed_rate": float(observed[mask].mean()),
                }
            )
    return {
        "n": int(observed.size),
        "base_rate": base,
        "mean_predicted": float(predicted.mean()),
        "brier": float(np.mean((predicted - observed) ** 2)),
        "brier_base_rate": float(np.mean((base - observed) ** 2)),
        "reliability": table,
    }


def sample_actor_actions(net: Any, obs: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """One action per (row, agent) from the parameter-shared actor: obs [N, A, D] -> [N, A]."""
    n, a, d = obs.shape
    x = torch.zeros(n, a, d + a)
    x[..., :d] = torch.from_numpy(np.asarray(obs, dtype=np.float32))
    x[..., d:] = torch.eye(a)
    with torch.no_grad():
        probs = torch.softmax(net.logits(x), dim=-1).reshape(n * a, -1)
    return torch.multinomial(probs, 1, generator=generator).reshape(n, a).numpy()


def true_lookahead_risk(
    env: Any,
    net: Any,
    *,
    lookahead: int,
    rollouts: int,
    seed: int,
) -> np.ndarray:
    """Real-dynamics risk [E, A, n_actions] of every candidate in `env`'s current state.

    Entry (e, i, c): fraction of `rollouts` real rollouts of `lookahead` steps, copy e, in which
    agent i's cost is > 0 at some step before the episode ends, when i takes c first and every
    agent otherwise samples from the actor `net`. `env` itself is not stepped or changed.
    """
    if lookahead < 1 or rollouts < 1:
        raise ValueError(f"lookahead and rollouts must be >= 1, got {lookahead}, {rollouts}")
    state = env.get_state()
    if "keys" not in state or "config" not in state:
        raise ValueError(
            f"true_lookahead_risk needs a native grid env (state with per-copy keys), got "
            f"{type(env).__name__}"
        )
    e, a, n_act = env.num_envs, env.n_agents, env.n_actions
    per_copy = a * n_act * rollouts
    total = e * per_copy
    rng = np.random.default_rng(seed)
    clone_state = {
        k: np.repeat(v, per_copy, axis=0)
        if isinstance(v, np.ndarray) and v.shape[:1] == (e,)
        else v
        for k, v in state.items()
    }
    # Fresh stream keys: every rollout draws its own slips.
    clone_state["keys"] = rng.integers(0, 2**63, size=total, dtype=np.int64).astype(np.uint64)
    clone_state["finished"] = np.zeros(total, dtype=bool)
    sim = type(env)(env.config, num_envs=total, seed=0)
    sim.reset()
    sim.set_state(clone_state)
    obs = sim.observe()
    row = np.arange(total)
    focal = (row // (n_act * rollouts)) % a
    candidate = (row // rollouts) % n_act
    generator = torch.Generator().manual_seed(seed)
    alive = np.ones(total, dtype=bool)
    violated = np.zeros(total, dtype=bool)
    for depth in range(lookahead):
        actions = sample_actor_actions(net, obs, generator)
        if depth == 0:
            actions[row, focal] = candidate
        result = sim.step(actions)
        violated |= alive & (np.asarray(result.cost)[row, focal] > 0)
        ended = np.asarray(result.terminated).any(axis=1) | np.asarray(result.truncated).any(axis=1)
        alive &= ~ended
        obs = result.obs
    return violated.reshape(e, a, n_act, rollouts).mean(axis=-1)


def model_lookahead_risk(
    shield: Shield, obs: np.ndarray, *, lookahead: int, rollouts: int
) -> np.ndarray:
    """The shield's own estimate k / K [E, A, n_actions] for every candidate of obs [E, A, D].

    Runs the shield's imagination with `lookahead` steps and `rollouts` rollouts (rounded up to
    the ensemble size); the shield's generator, counters and config are left as they were.
    """
    if lookahead < 1 or rollouts < 1:
        raise ValueError(f"lookahead and rollouts must be >= 1, got {lookahead}, {rollouts}")
    obs = np.asarray(obs, dtype=np.float32)
    e, a, d = obs.shape
    n_act = shield.n_actions
    m = shield.world_model.ensemble_size
    k = -(-rollouts // m) * m
    config, stats = shield.config, dataclasses.replace(shield.stats)
    generator_state = shield.generator.get_state()
    shield.config = dataclasses.replace(config, lookahead=lookahead)
    try:
        joint = torch.from_numpy(obs.reshape(e, a * d))
        block_copy = np.repeat(np.arange(e), a * n_act)
        block_agent = np.tile(np.repeat(np.arange(a), n_act), e)
        block_action = np.tile(np.arange(n_act), e * a)
        with torch.inference_mode():
            counts = shield._count_violations(
                joint[torch.from_numpy(block_copy)],
                torch.from_numpy(block_agent),
                torch.from_numpy(block_action),
                k,
            )
    finally:
        shield.config = config
        shield.stats = stats
        shield.generator.set_state(generator_state)
    return (counts / k).reshape(e, a, n_act)


def risk_summary(true: np.ndarray, model: np.ndarray, *, max_risk: float) -> dict[str, float]:
    """Compare real and imagined risks [..., n_actions] of the same candidates.

    best_*: the lowest-risk candidate of each decision (real risk, and the model's estimate of
    its own lowest candidate); low_*: the candidates whose real risk is below 2%, and how the
    model rates them (mean estimate, share above 5%).
    """
    true = np.asarray(true, dtype=np.float64)
    model = np.asarray(model, dtype=np.float64)
    if true.shape != model.shape:
        raise ValueError(f"true and model risks differ in shape: {true.shape} vs {model.shape}")
    best = true.min(axis=-1)
    low = true < 0.02
    return {
        "decisions": int(best.size),
        "best_true_median": float(np.median(best)),
        "best_true_share_below_2pct": float(np.mean(best < 0.02)),
        "best_true_share_within_max_risk": float(np.mean(best <= max_risk)),
        "best_true_mean": float(best.mean()),
        "best_model_mean": float(model.min(axis=-1).mean()),
        "mean_abs_error": float(np.abs(model - true).mean()),
        "low_candidates": int(low.sum()),
        "low_true_mean": float(true[low].mean()) if low.any() else float("nan"),
        "low_model_mean": float(model[low].mean()) if low.any() else float("nan"),
        "low_model_share_above_5pct": float(np.mean(model[low] > 0.05))
        if low.any()
        else float("nan"),
    }


# --------------------------------------------------------------------------------------------
# v1: the calibrated risk U of a decision against the true env
# --------------------------------------------------------------------------------------------


def clone_env(env: Any, index: np.ndarray, *, seed: int) -> Any:
    """A vector env of the native grid tasks whose copy j is env's copy `index[j]`, with a
    fresh random stream per clone (so the clones' slips are independent draws)."""
    state = env.get_state()
    if "keys" not in state or "config" not in state:
        raise ValueError(f"cloning needs a native grid env, got {type(env).__name__}")
    index = np.asarray(index, dtype=np.int64)
    e = env.num_envs
    clone = {
        k: (np.asarray(v)[index] if isinstance(v, np.ndarray) and v.shape[:1] == (e,) else v)
        for k, v in state.items()
    }
    rng = np.random.default_rng(seed)
    clone["keys"] = rng.integers(0, 2**63, size=len(index), dtype=np.int64).astype(np.uint64)
    clone["finished"] = np.zeros(len(index), dtype=bool)
    sim = type(env)(env.config, num_envs=len(index), seed=0)
    sim.reset()
    sim.set_state(clone)
    return sim


def backup_actions(shield: Any, obs: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """The v1 shield's safest joint action [N, A] for observations [N, A, D] with `remaining`
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
    k = shield.joint.shape[0]
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
                shield.joint.repeat(u, 1),
                left.repeat_interleave(k),
            ).view(u, k)
            picks.append(risks.argmin(dim=1))
    return shield.joint[torch.cat(picks)].numpy()[inverse.reshape(-1)]


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
    first[e] [E, A] now and the v1 shield's backup after it, by Monte Carlo of the real env
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
    budget: np.ndarray | None = None,
) -> np.ndarray:
    """True P(violation within horizon[e] steps) [E] of copy e of `env` taking joint action
    first[e] [E, A] now and then acting with `follower` (e.g. the deployed shielded policy,
    `src.algos.policy.Actor`), by Monte Carlo of the real env: `rollouts` clones per copy, all
    driven by `follower`, reset for them with `follower_seed`.

    `horizon`: steps counted, this one included (one number, or one per copy [E]); a violation
    in any of them counts, an episode that ends first does not. `episode_step` [E]: the
    1-based step of `first` in its episode (the follower acts from the next one). `budget` [E]:
    with the `episode` scope, the excess budget each copy's shield has left after `first`
    (given to the follower's shield, `follower.action_filter`). `env` is not changed.
    """
    e = env.num_envs
    window = np.repeat(_per_copy("horizon", horizon, e), rollouts)
    step = np.repeat(np.asarray(episode_step, dtype=np.int64).reshape(e), rollouts)
    sim = clone_env(env, np.repeat(np.arange(e), rollouts), seed=seed)
    follower.reset(len(window), follower_seed)
    if budget is not None:
        shield = follower.action_filter
        shield.budget = np.repeat(np.asarray(budget, dtype=np.float64).reshape(e), rollouts)

    def follow(result: Any, alive: np.ndarray, ended: np.ndarray, depth: int) -> np.ndarray:
        # Every clone keeps acting (the follower's batch is fixed); only the live ones count.
        nonlocal step
        step = np.where(ended, 1, step + 1)
        return np.asarray(follower.act(result.obs, step), dtype=np.int64)

    return _violated_within(sim, first, window, follow).reshape(e, rollouts).mean(axis=1)


def certified_plan_risk(
    shield: Any, obs: np.ndarray, first: np.ndarray, *, horizon: int | np.ndarray
) -> np.ndarray:
    """The v1 shield's calibrated risk U [N] of `first` [N, A] at obs [N, A, D] over `horizon`
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
