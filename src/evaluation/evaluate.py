"""Final-policy evaluation of a run (docs/design.md), written to `eval.parquet`.

`final_policy_eval_episodes` episodes N per run; run r's episode i is seeded
`final_policy_eval_seed_offset + r * N + i`, the same for every algorithm (paired comparisons)
and disjoint between runs (pooled episodes are independent layouts), run in batches of env
copies of one `VectorEnv`; the hidden training cap is lifted to the largest horizon. Each row
keeps, besides the counts, the indices i of its violating episodes (`violating_episodes`), so
that two algorithms' run r can be compared episode by episode on the same seeds. Shielded
algorithms are evaluated twice (their spec's `eval_modes`): with the shield (deployed policy)
and without it (base policy). Every row of a run carries the certificate of its deployed
shield (`src.algos.shield.calibration.Certificate`, read from policy.pt; null columns for runs
without one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from src.algos.policy import load_actor
from src.algos.registry import get_algorithm
from src.algos.shield.calibration import load_certificate
from src.analysis.export import (
    EVAL_SCHEMA,
    certificate_columns,
    load_run_config,
    table_with_config,
)
from src.analysis.files import write_parquet
from src.config.base import VERSION_KEYS
from src.config.run import RunConfig
from src.envs.registry import make_vector_env
from src.evaluation.episodes import EpisodeBatch, horizon_summary

__all__ = ["collect_episodes", "evaluate_run"]


class StepResultLike(Protocol):
    """The fields of `src.envs.base.StepResult` that the evaluation reads."""

    obs: np.ndarray
    reward: np.ndarray
    cost: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class VectorEnvLike(Protocol):
    """The part of `src.envs.base.VectorEnv` that the evaluation uses."""

    num_envs: int

    def reset(self, seed: int | Sequence[int] | None = None) -> np.ndarray: ...

    def step(self, actions: np.ndarray) -> StepResultLike: ...

    def close(self) -> None: ...


class ActorLike(Protocol):
    """The part of `src.algos.policy.Actor` that the evaluation uses."""

    def reset(self, num_envs: int, seed: int) -> None: ...

    def act(self, obs: np.ndarray, episode_step: np.ndarray) -> np.ndarray: ...


def collect_episodes(
    *,
    make_vec: Callable[[int], VectorEnvLike],
    actor: ActorLike,
    seeds: Sequence[int],
    max_steps: int,
    batch_size: int,
    actor_seed: int,
) -> EpisodeBatch:
    """Run one episode per seed, `batch_size` env copies at a time, for at most `max_steps` steps.

    `make_vec(E)` builds a vector env of E copies whose hidden cap is at least `max_steps`; it
    is called once per distinct batch size. Batch b resets its copies with its slice of `seeds`
    and the actor with `actor_seed + b * batch_size`. A copy's steps after its episode ended
    (the env auto-resets it) are masked out; the batch stops when every copy has finished.
    """
    seeds = [int(s) for s in seeds]
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(seeds)
    reward = np.zeros((n, max_steps), dtype=np.float64)  # [N, T]
    cost = np.zeros((n, max_steps), dtype=np.float64)  # [N, T]
    violation = np.zeros((n, max_steps), dtype=bool)  # [N, T]
    collision: np.ndarray | None = np.zeros((n, max_steps), dtype=bool)  # [N, T]
    goals: np.ndarray | None = np.zeros((n, max_steps), dtype=np.float64)  # [N, T]
    length = np.zeros(n, dtype=np.int64)  # [N]
    envs: dict[int, VectorEnvLike] = {}
    try:
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            copies = stop - start
            if copies not in envs:
                envs[copies] = make_vec(copies)
            vec = envs[copies]
            if vec.num_envs != copies:
                raise ValueError(f"make_vec({copies}) returned {vec.num_envs} copies")
            obs = vec.reset(seed=seeds[start:stop])  # [E, A, D]
            actor.reset(num_envs=copies, seed=actor_seed + start)
            active = np.ones(copies, dtype=bool)  # [E]
            # [E] 1-based index of the step the next actions take (the shield's schedule uses it)
            step_in_episode = np.ones(copies, dtype=np.int64)
            for t in range(max_steps):
                actions = actor.act(obs, step_in_episode)  # [E, A]
                result = vec.step(actions)
                rows = slice(start, stop)
                reward[rows, t] = np.where(active, result.reward.sum(axis=1), 0.0)
                cost[rows, t] = np.where(active, result.cost.sum(axis=1), 0.0)
                violation[rows, t] = active & (result.cost > 0).any(axis=1)
                told = getattr(result, "collision", None)
                if told is None:
                    collision = None  # the task does not tell collisions apart
                elif collision is not None:
                    collision[rows, t] = active & np.asarray(told).any(axis=1)
                arrived = getattr(result, "arrived", None)
                if arrived is None:
                    goals = None  # the task has no goals
                elif goals is not None:
                    goals[rows, t] = np.where(active, np.asarray(arrived).sum(axis=1), 0.0)
                length[rows] += active
                # Episodes end for all agents of a copy at once.
                active &= ~(result.terminated.any(axis=1) | result.truncated.any(axis=1))
                if not active.any():
                    break
                obs = result.obs
                step_in_episode += 1
    finally:
        for vec in envs.values():
            vec.close()
    return EpisodeBatch(
        reward=reward,
        cost=cost,
        violation=violation,
        length=length,
        collision=collision,
        goals=goals,
    )


def _rows(
    config: RunConfig,
    summary: pd.DataFrame,
    *,
    shielded: bool,
    certificate: Mapping[str, Any] | None,
) -> pd.DataFrame:
    frame = summary.copy()
    frame.insert(0, "env", config.env_name)
    frame.insert(1, "algo", config.algo)
    frame.insert(2, "run", config.run_idx)
    frame.insert(4, "shielded", shielded)
    confidence = config.evaluation.final_policy_eval_confidence
    frame.insert(frame.columns.get_loc("ci_high") + 1, "confidence", confidence)
    for key in VERSION_KEYS:
        frame[key] = config.version(key)
    for name, value in certificate_columns(certificate).items():
        # One value per row; object dtype keeps None (no certificate) and exact integers.
        frame[name] = pd.Series([value] * len(frame), index=frame.index, dtype=object)
    return frame


def evaluate_run(run_dir: str | Path, out_path: str | Path) -> pd.DataFrame:
    """Evaluate a run's final policy and write `eval.parquet` (one row per horizon and shield mode).

    Reads the run's config.json and policy.pt (the policy, and once the shield's certificate:
    `src.algos.shield.calibration.load_certificate`). With `final_policy_eval_episodes: 0`
    the file is written with the schema and no rows. Returns the table as a DataFrame with
    the columns of `src.analysis.export.EVAL_SCHEMA`.
    """
    raw = load_run_config(run_dir)
    config = RunConfig.from_dict(raw)
    settings = config.evaluation
    frames: list[pd.DataFrame] = []
    if settings.episodes > 0:
        # Lift the hidden training cap to the largest horizon.
        params = config.env.constructor_params(max_steps=settings.max_horizon)
        certificate = load_certificate(run_dir)
        certificate_dict = None if certificate is None else certificate.to_dict()
        for shielded in get_algorithm(config.algo).eval_modes:
            actor = load_actor(run_dir, shielded=shielded)
            batch = collect_episodes(
                make_vec=lambda copies: make_vector_env(
                    config.env_name, num_envs=copies, seed=None, **params
                ),
                actor=actor,
                seeds=settings.seeds(config.run_idx),
                max_steps=settings.max_horizon,
                batch_size=settings.batch_size,
                actor_seed=settings.first_seed(config.run_idx),
            )
            summary = horizon_summary(
                batch, settings.horizons, confidence=settings.final_policy_eval_confidence
            )
            frames.append(_rows(config, summary, shielded=shielded, certificate=certificate_dict))
    result = (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=EVAL_SCHEMA.names)
    )
    table = table_with_config(result, EVAL_SCHEMA, raw)
    write_parquet(table, out_path)
    return table.to_pandas()
