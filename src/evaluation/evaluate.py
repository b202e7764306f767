"""Final-policy evaluation of a run (docs/design.md), written to `eval.parquet`.

`final_policy_eval_episodes` episodes N per run; run r's episode i is seeded
`final_policy_eval_seed_offset + r * N + i`, the same for every algorithm (paired comparisons)
and disjoint between runs (pooled episodes are independent layouts), run in batches of env
copies of one `VectorEnv`; the hidden training cap is lifted to the largest horizon. Each row
keeps, besides the counts, the indices i of its violating episodes (`violating_episodes`), so
that two algorithms' run r can be compared episode by episode on the same seeds. Shielded
algorithms are evaluated twice (the run config's `eval_modes`): with the shield (deployed policy)
and without it (base policy). Every row of a run carries the certificate of its deployed
shield (`src.algos.shield.calibration.Certificate`, read from policy.pt; null columns for runs
without one). On request the episodes themselves are kept too (`eval_episodes.parquet`: return,
cost, first violation and the shield's interventions of each, `EVAL_EPISODES_SCHEMA`), and the
certificate as a small record of its own (`certificate.json`, `src.schemas.certificate_record`).

`evaluate_policy` is the evaluation itself of a policy's actors on any reset seeds and horizons
(the command `python -m src.evaluation.checkpoint` evaluates a saved run with it);
`evaluate_run` reads a run folder and runs it on the run config's own seeds and horizons.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from src.algos.policy import load_actor
from src.algos.shield.calibration import load_certificate
from src.config.base import VERSION_KEYS
from src.config.recorded import read_run_config
from src.config.run import RunConfig
from src.envs.registry import make_vector_env
from src.evaluation.episodes import (
    EpisodeBatch,
    first_violation_steps,
    horizon_summary,
    sums_within_horizons,
)
from src.evaluation.run_inputs import check_eval_memory, check_policy
from src.runfiles import RunFiles
from src.schemas import (
    EVAL_EPISODES_SCHEMA,
    EVAL_SCHEMA,
    certificate_columns,
    certificate_record,
    table_with_config,
    write_certificate_record,
    write_parquet,
)

__all__ = ["collect_episodes", "episode_rows", "evaluate_policy", "evaluate_run"]


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


def _replaced(actor: ActorLike, copies: int) -> np.ndarray | None:
    """[E] agents whose action the actor's shield replaced at its last `act`: zeros for an
    actor without a shield (`shielded` False), None when the actor does not say (no
    `shielded` attribute, or a shielded one without `last_intervened` flags of its copies)."""
    shielded = getattr(actor, "shielded", None)
    if shielded is False:
        return np.zeros(copies, dtype=np.int64)
    flags = getattr(actor, "last_intervened", None)
    if shielded is not True or flags is None:
        return None
    flags = np.asarray(flags)
    if flags.ndim < 1 or flags.shape[0] != copies:
        return None
    return flags.reshape(copies, -1).astype(bool).sum(axis=1).astype(np.int64)


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
    interventions: np.ndarray | None = np.zeros((n, max_steps), dtype=np.int64)  # [N, T]
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
                replaced = _replaced(actor, copies)  # [E] or None
                result = vec.step(actions)
                rows = slice(start, stop)
                if replaced is None:
                    interventions = None  # the policy does not say what its shield replaced
                elif interventions is not None:
                    interventions[rows, t] = np.where(active, replaced, 0)
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
        interventions=interventions,
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


def episode_rows(
    config: RunConfig, batch: EpisodeBatch, *, shielded: bool, seeds: Sequence[int]
) -> pd.DataFrame:
    """One row per episode of `batch` (`EVAL_EPISODES_SCHEMA`): its reset seed, the steps it
    lasted, its team return and cost over them (all of the batch's steps: the largest horizon),
    its first violation (-1: none) and the agent-steps whose action the shield replaced (null
    when the policy does not say)."""
    n = batch.n_episodes
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds for {n} episodes")
    # The same sums as the largest horizon's mean_return and mean_cost of eval.parquet.
    returns = sums_within_horizons(batch.reward, batch.length, [batch.max_steps])[0]
    costs = sums_within_horizons(batch.cost, batch.length, [batch.max_steps])[0]
    replaced: list[int | None] = [None] * n
    if batch.interventions is not None:
        valid = np.arange(batch.max_steps)[None, :] < batch.length[:, None]
        replaced = np.where(valid, batch.interventions, 0).sum(axis=1).astype(int).tolist()
    return pd.DataFrame(
        {
            "env": config.env_name,
            "algo": config.algo,
            "run": config.run_idx,
            "shielded": shielded,
            "episode": np.arange(n, dtype=np.int64),
            "seed": np.asarray([int(seed) for seed in seeds], dtype=np.int64),
            "length": batch.length,
            "team_return": returns,
            "cost": costs,
            "first_violation_step": first_violation_steps(batch.violation, batch.length),
            "shield_interventions": pd.Series(replaced, dtype=object),
        },
        columns=EVAL_EPISODES_SCHEMA.names,
    )


def evaluate_policy(
    actors: Mapping[bool, ActorLike],
    config: RunConfig,
    *,
    seeds: Sequence[int],
    horizons: Sequence[int],
    batch_size: int,
    actor_seed: int,
    certificate: Mapping[str, Any] | None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluate a run's final policy on `seeds` (one episode each) in every shield mode of
    `actors` (mode -> the policy acting in it, `src.algos.policy.load_actor`; True: the shield
    filters the actions): (rows of eval.parquet, one per mode and horizon, each with the
    deployed shield's `certificate` as a dict, `Certificate.to_dict`; rows of
    eval_episodes.parquet, one per mode and episode). No actor: no rows.

    The hidden training cap is lifted to the largest horizon; the episodes run `batch_size`
    env copies at a time, the policy's generator of batch b seeded `actor_seed + b *
    batch_size` (`collect_episodes`). With the run config's seeds, horizons, batch size and
    first seed it is the run's own evaluation (`evaluate_run`).
    """
    horizons = [int(h) for h in horizons]
    max_steps = max(horizons)
    params = config.env.constructor_params(max_steps=max_steps)
    rows: list[pd.DataFrame] = []
    episodes: list[pd.DataFrame] = []
    for shielded, actor in actors.items():
        batch = collect_episodes(
            make_vec=lambda copies: make_vector_env(
                config.env_name, num_envs=copies, seed=None, **params
            ),
            actor=actor,
            seeds=seeds,
            max_steps=max_steps,
            batch_size=batch_size,
            actor_seed=actor_seed,
        )
        summary = horizon_summary(
            batch, horizons, confidence=config.evaluation.final_policy_eval_confidence
        )
        rows.append(_rows(config, summary, shielded=shielded, certificate=certificate))
        episodes.append(episode_rows(config, batch, shielded=shielded, seeds=seeds))
    if not rows:
        return (
            pd.DataFrame(columns=EVAL_SCHEMA.names),
            pd.DataFrame(columns=EVAL_EPISODES_SCHEMA.names),
        )
    return pd.concat(rows, ignore_index=True), pd.concat(episodes, ignore_index=True)


def evaluate_run(
    run_dir: str | Path,
    out_path: str | Path,
    *,
    episodes_out: str | Path | None = None,
    certificate_out: str | Path | None = None,
) -> pd.DataFrame:
    """Evaluate a run's final policy and write `eval.parquet` (one row per horizon and shield mode).

    Reads the run's config.json (the run config it records, `src.runfiles.RunFiles.
    read_run_config`) and policy.pt (the policy in each of the run config's `eval_modes`, and
    once the shield's certificate, `src.algos.shield.calibration.load_certificate`), both
    checked first (bounded values; `src.evaluation.run_inputs`: the policy's recorded shapes,
    the evaluation's memory estimate within the job's). With `final_policy_eval_episodes: 0`
    the file is written with the schema and no rows. Returns the table as a DataFrame with
    the columns of `src.schemas.EVAL_SCHEMA`.

    `episodes_out`: also write the episodes (`eval_episodes.parquet`, `EVAL_EPISODES_SCHEMA`,
    the run's config as metadata); `certificate_out`: also write the certificate record
    (`certificate.json`, `src.schemas.certificate_record`). Every file is computed before the
    first is written, each atomically.
    """
    files = RunFiles(run_dir)
    raw, config = read_run_config(files)
    settings = config.evaluation
    actors: dict[bool, ActorLike] = {}
    certificate = None
    if settings.episodes > 0 or certificate_out is not None:
        # Before the policy's certificate is read or its network built: its recorded shapes,
        # and the episodes and horizons of config.json, within the job's memory.
        shape = check_policy(run_dir, config)
        if settings.episodes > 0:
            obs_dim, n_actions, box = shape or (1, 1, False)
            check_eval_memory(config, files.config, obs_dim=obs_dim, n_actions=n_actions, box=box)
            actors = {mode: load_actor(run_dir, shielded=mode) for mode in config.eval_modes}
        certificate = load_certificate(run_dir)
    certificate_dict = None if certificate is None else certificate.to_dict()
    result, episodes = evaluate_policy(
        actors,
        config,
        seeds=settings.seeds(config.run_idx),
        horizons=settings.horizons,
        batch_size=settings.batch_size,
        actor_seed=settings.first_seed(config.run_idx),
        certificate=certificate_dict,
    )
    table = table_with_config(result, EVAL_SCHEMA, raw)
    episode_table = table_with_config(episodes, EVAL_EPISODES_SCHEMA, raw)
    record = None if certificate_out is None else certificate_record(raw, certificate_dict)
    write_parquet(table, out_path)
    if episodes_out is not None:
        write_parquet(episode_table, episodes_out)
    if record is not None and certificate_out is not None:
        write_certificate_record(record, certificate_out)
    return table.to_pandas()
