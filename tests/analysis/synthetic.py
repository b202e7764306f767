"""Synthetic run folders (config, history, updates, eval) for the analysis and evaluation tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from src.algos import metrics
from src.algos.registry import algorithm_names, get_algorithm
from src.analysis.export import export_run
from src.config.base import VERSION_KEYS
from src.config.run import RunConfig, make_run_config
from src.evaluation.episodes import EpisodeBatch, horizon_summary
from src.schemas import EVAL_SCHEMA, certificate_columns, table_with_config, write_parquet

HORIZONS = (1, 10, 50, 100, 200)
# Per algorithm: how risky the synthetic policy is and how much return it gets.
PROFILE = {"ippo": (0.02, 1.0), "ippo_lag": (0.006, 0.8), "shield": (0.002, 0.7)}


def _shielded(algo: str) -> bool:
    return algo in algorithm_names() and get_algorithm(algo).shielded


def make_config(env: str, algo: str, run: int, *, episodes: int = 50) -> dict:
    """A resolved run config (flat form), as training writes it into config.json
    (`RunConfig.to_dict`): the constraint covers the episode cap, 100 steps (evaluated up to
    200)."""
    flat = make_run_config(
        env_name=env,
        algo=algo,
        run_idx=run,
        n_agents=2,
        num_envs=4,
        env_params={"max_steps": 100},
        constraint_horizon=100,
        final_policy_eval_episodes=episodes,
        final_policy_eval_horizons=HORIZONS,
        final_policy_eval_seed_offset=1_000_000,
        final_policy_eval_confidence=0.95,
    )
    return RunConfig.from_dict(flat).to_dict()


def make_history(env: str, algo: str, run: int, *, episodes: int = 60, seed: int = 0) -> list[dict]:
    """EpisodeLog dicts of a run whose return rises and cost falls over training."""
    rng = np.random.default_rng([seed, run, len(algo), len(env)])
    risk, scale = PROFILE.get(algo, (0.01, 1.0))
    records = []
    t = 0
    for episode in range(episodes):
        length = 50
        progress = episode / max(episodes - 1, 1)
        agent_returns = tuple(float(scale * (progress * 10 + rng.normal())) for _ in range(2))
        violated = bool(rng.random() < min(1.0, risk * 50 * (1.2 - progress)))
        first = int(rng.integers(1, length + 1)) if violated else -1
        records.append(
            {
                "env": env,
                "algo": algo,
                "run": run,
                "episode": episode,
                "env_copy": episode % 4,
                "t_start": t,
                "t_end": t + length,
                "length": length,
                "team_return": float(sum(agent_returns)),
                "agent_returns": list(agent_returns),
                "cost": float(violated) * float(rng.integers(1, 4)),
                "violated": violated,
                "first_violation_step": first,
                "truncated_by_cap": True,
                "shield_interventions": int(rng.integers(0, 20)) if _shielded(algo) else 0,
            }
        )
        t += length
    return records


def make_updates(
    algo: str, *, run: int = 0, updates: int = 12, steps_per_update: int = 250
) -> list[dict]:
    """Flat update metric dicts as the trainer writes them."""
    rng = np.random.default_rng([run, len(algo)])
    rows = []
    for update in range(updates):
        row = {
            "update": update,
            "global_step": (update + 1) * steps_per_update,
            "wall_time": 0.5 * (update + 1),
            metrics.POLICY_LOSS: 0.1 / (update + 1),
            metrics.VALUE_LOSS: 1.0 / (update + 1),
        }
        if algo == "ippo_lag":
            row[metrics.LAMBDA] = 0.05 * update
        if _shielded(algo):
            row[metrics.SHIELD_SECONDS] = 0.25 * (run + 1)
            row[metrics.SHIELD_INTERVENTIONS] = float(max(0, 30 - 2 * update + rng.integers(-3, 4)))
            row[metrics.SHIELD_NO_SAFE_ACTION] = float(update % 3)
        rows.append(row)
    return rows


def make_certificate(
    run: int, *, certified: bool, episodes: int = 200, delta: float = 0.05
) -> dict[str, Any]:
    """A certificate dict as the shield stores it in policy.pt (`Certificate.to_dict`):
    certified with 8 violating calibration episodes of 200, else failed with 40; `episodes`
    0 is a run that tested nothing."""
    if episodes == 0:
        violations, p_value, tested = -1, float("nan"), []
    else:
        violations = 8 if certified else 40
        p_value = 0.0001 if certified else 0.97
        tested = [{"allowance": 0.02, "violations": violations, "p_value": p_value, "return": 1.0}]
    return {
        "certified": certified,
        "allowance": 0.02,
        "max_risk": 0.1,
        "delta": delta,
        "horizon": 100,
        "episodes": episodes,
        "violations": violations,
        "p_value": p_value,
        "first_seed": 2_000_000 + run * episodes,
        "tested": tested,
    }


def make_eval_frame(
    config: dict,
    *,
    episodes: int = 200,
    seed: int = 0,
    certificate: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Eval rows computed from synthetic episodes by the real horizon summary, with the
    columns of `certificate` (a certificate dict, None: a run without one)."""
    rng = np.random.default_rng(
        [seed, config["run_idx"], len(config["algo"]), len(config["env_name"])]
    )
    risk, scale = PROFILE.get(config["algo"], (0.01, 1.0))
    modes = (True, False) if _shielded(config["algo"]) else (False,)
    frames = []
    for shielded in modes:
        step_risk = risk if shielded or not _shielded(config["algo"]) else risk * 5
        steps = max(HORIZONS)
        violation = rng.random((episodes, steps)) < step_risk
        batch = EpisodeBatch(
            reward=scale * rng.random((episodes, steps)),
            cost=violation.astype(np.float64),
            violation=violation,
            length=np.full(episodes, steps, dtype=np.int64),
        )
        summary = horizon_summary(batch, HORIZONS, confidence=0.95)
        summary.insert(0, "env", config["env_name"])
        summary.insert(1, "algo", config["algo"])
        summary.insert(2, "run", config["run_idx"])
        summary["shielded"] = shielded
        summary["confidence"] = 0.95
        for key in VERSION_KEYS:
            summary[key] = config[key]
        for name, value in certificate_columns(certificate).items():
            summary[name] = pd.Series([value] * len(summary), dtype=object)
        frames.append(summary)
    return pd.concat(frames, ignore_index=True)


def write_run_dir(
    root: Path,
    env: str,
    algo: str,
    run: int,
    *,
    eval_episodes: int = 200,
    history_episodes: int = 60,
    certificate: Mapping[str, Any] | None = None,
) -> Path:
    """A complete run folder as the workflow leaves it before aggregation (`certificate`:
    the certificate dict of its eval rows)."""
    run_dir = root / "runs" / env / algo / f"run{run}"
    run_dir.mkdir(parents=True)
    config = make_config(env, algo, run, episodes=eval_episodes)
    (run_dir / "config.json").write_text(json.dumps(config))
    history = make_history(env, algo, run, episodes=history_episodes)
    (run_dir / "history.json").write_text(json.dumps(history))
    (run_dir / "updates.json").write_text(json.dumps(make_updates(algo, run=run)))
    export_run(run_dir, run_dir / "history.parquet", run_dir / "updates.parquet")
    frame = (
        make_eval_frame(config, episodes=eval_episodes, certificate=certificate)
        if eval_episodes > 0
        else pd.DataFrame(columns=EVAL_SCHEMA.names)
    )
    write_parquet(table_with_config(frame, EVAL_SCHEMA, config), run_dir / "eval.parquet")
    return run_dir


def write_experiment(
    root: Path,
    *,
    envs: tuple[str, ...] = ("hazard_grid", "spread"),
    algos: tuple[str, ...] = ("ippo", "ippo_lag", "shield"),
    runs: int = 3,
    eval_episodes: int = 200,
    certified: Mapping[int, bool] | None = None,
) -> list[Path]:
    """Run folders for every (env, algo, run) of a small synthetic experiment; with
    `certified` (run -> passed), the `shield` runs carry a certificate (`make_certificate`)."""
    return [
        write_run_dir(
            root,
            env,
            algo,
            run,
            eval_episodes=eval_episodes,
            certificate=(
                make_certificate(run, certified=certified[run])
                if certified is not None and _shielded(algo)
                else None
            ),
        )
        for env in envs
        for algo in algos
        for run in range(runs)
    ]
