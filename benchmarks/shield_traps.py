"""Where a deployed shield's violations come from: did its models see them coming, and was
there a joint action its models judged safe?

Every trained shield run of a results folder (`runs/{env}/{algo}/run{i}` of a shielded
algorithm) is deployed at its own deployed allowance (the certified one, or the most cautious
rung tested where it has no certificate) on `--episodes` episodes of its constraint horizon, from
reset seeds of the spent tuning range (`src.seeds.TUNING`, `TRAPS_SHIFT` on, where no other
benchmark plays). Every step records the executed joint action's q (the models' risk, the
largest agent's for the decentralised shield) and whether the shield fell back (nothing it
looked at was within the allowance). Per run:

- violating episodes, the share of decisions that fell back and the median q of all decisions;
- per violating episode, the `horizon` steps (the shield's own) up to its first violation:
  whether a decision there fell back (the models saw the violation coming and found no way
  out) and the largest q there (how clearly they saw it);
- per decision that fell back with q above `HOT` (Discrete actions, at most
  `EXHAUSTIVE_CAP` joint actions): the least q over every joint action of the team, by the
  same models. Equal to the executed q: the models see no way out (a trap, in the models);
  far below it: a joint action the models judge safe was not taken (the search, or the
  decentralised shield's rule of judging each agent alone);
- per decision whose one-step risk r of the executed joint action (the models' probability of
  a violation at this very step, the first term of q) is above `NEAR` by the worst member
  (Discrete actions): r of the worst member and the members' mean against the share of those
  steps that violated in the real env (the one-step risk calibrated, or not, where it counts);
- and, in the true env (the copy cloned, `src.algos.shield.diagnostics.clone_env`), whether
  the task's witness team (`src.envs.witness`: the careful team that gives the risk floor)
  goes the shield's `horizon` steps from that state without a violation: a way out in
  reality, whatever the models say.

Run: `python -m benchmarks.shield_traps --results results/paper [--episodes N] [--write]`.
Results go to `benchmarks/out/shield_traps.json` and, with `--write`, the shield_traps section
of BENCHMARKS.md.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import arguments, positive_int, table
from benchmarks.ladder import allowance, ran, record_shield_runs
from src.algos.policy import load_actor
from src.algos.shield.calibration import load_certificate
from src.algos.shield.diagnostics import clone_env
from src.algos.shield.search import joint_actions
from src.envs.registry import make_vector_env
from src.envs.spread_core import NativeSpreadVectorEnv
from src.envs.witness import CarefulTeam, SpreadTeam
from src.seeds import TUNING

TRAPS_SHIFT = 900_000
"""The first reset seed played is `TUNING.first` + this (the ladder plays from 800,000 on,
the tuning benchmark below 600,000)."""
HOT = 0.1
"""A fallback whose executed q is above this is judged against every joint action."""
NEAR = 0.05
"""A decision whose one-step risk r (the worst member's) is above this is compared with what
the step did in the real env."""
EXHAUSTIVE_CAP = 4096
"""At most this many joint actions (n_actions ** n_agents) are judged per such decision."""
BATCH = 100
"""Episodes played at once (copies of the env), as the ladder plays them."""


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def witness_clear(env: Any, rows: np.ndarray, steps: int, seed: int) -> np.ndarray | None:
    """[R] whether the witness team, from the current state of `env`'s copies `rows` (clones
    of them), goes `steps` steps without a violation; None where the env cannot be cloned."""
    try:
        sim = clone_env(env, rows, seed=seed)
    except ValueError:
        return None
    team = SpreadTeam() if isinstance(sim, NativeSpreadVectorEnv) else CarefulTeam()
    rng = np.random.default_rng(seed)
    clear = np.ones(len(rows), dtype=bool)
    going = np.ones(len(rows), dtype=bool)
    try:
        for t in range(steps):
            result = sim.step(team(sim, rng, t))
            clear &= ~(going & (result.cost > 0).any(axis=1))
            going &= ~(result.terminated.any(axis=1) | result.truncated.any(axis=1))
            if not going.any():
                break
    finally:
        sim.close()
    return clear


def one_step_risk(shield: Any, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """[M, E] every world-model member's one-step team risk r of the joint actions `actions`
    [E, A] in the copies' observations `obs` [E, A, D]."""
    m = shield.world_model.ensemble_size
    with torch.inference_mode():
        joint = torch.as_tensor(obs, dtype=torch.float32).reshape(len(obs), -1)
        joint_action = torch.as_tensor(np.asarray(actions), dtype=torch.int64)
        _, risk, _ = shield.world_model.predict(
            joint.expand(m, *joint.shape), joint_action.expand(m, *joint_action.shape)
        )
    return risk[..., 0].double().numpy()


def trace(run: Path, episodes: int, allowance: float | None = None) -> dict[str, Any]:
    """`run`'s shield deployed at `allowance` (default: its deployed allowance) on `episodes`
    episodes: the row of this benchmark (module docstring)."""
    actor = load_actor(run)
    certificate = load_certificate(run)
    config = actor.config
    shield = actor.action_filter
    if allowance is not None:
        shield.allowance = allowance
    horizon = int(config.constraint_horizon)
    window = int(shield.config.horizon)
    first = TUNING.first + TRAPS_SHIFT
    params = config.env.constructor_params(max_steps=horizon)
    every = None
    if getattr(actor, "box", None) is None:
        count = shield.n_actions**shield.n_agents
        if count <= EXHAUSTIVE_CAP:
            every = torch.from_numpy(np.asarray(joint_actions(shield.n_agents, shield.n_actions)))
    raw = np.full((episodes, horizon), np.nan)
    fell = np.zeros((episodes, horizon), dtype=bool)
    violated = np.zeros((episodes, horizon), dtype=bool)
    near: list[tuple[float, float, bool]] = []  # (worst r, mean r, violated at the step)
    hot: list[tuple[float, float]] = []  # (executed q, least q over every joint action)
    real: list[bool] = []  # the witness's way out from the state of each such decision
    for low in range(0, episodes, BATCH):
        # Episodes low.. in one batch of copies, as the evaluation plays them (seeded by its
        # first reset seed).
        high = min(low + BATCH, episodes)
        copies, seed = high - low, first + low
        vec = make_vector_env(config.env_name, num_envs=copies, seed=None, **params)
        try:
            obs = vec.reset(seed=list(range(seed, seed + copies)))
            actor.reset(num_envs=copies, seed=seed)
            active = np.ones(copies, dtype=bool)
            step = np.ones(copies, dtype=np.int64)
            for t in range(horizon):
                actions = actor.act(obs, step)
                last = shield.last
                raw[low:high, t] = np.where(active, last.raw, np.nan)
                fell[low:high, t] = active & last.fallback
                rows = np.flatnonzero(fell[low:high, t] & (last.raw > HOT))
                if every is not None and len(rows):  # the witness teams take Discrete actions
                    with torch.inference_mode():
                        joint = torch.as_tensor(obs[rows], dtype=torch.float32)
                        options = every.unsqueeze(0).expand(len(rows), -1, -1)
                        left = torch.full((len(rows),), float(window))
                        least = shield.raw_risk_options(
                            joint.reshape(len(rows), -1), options, left
                        ).amin(dim=1)
                    hot += list(zip(last.raw[rows].tolist(), least.tolist(), strict=True))
                    clear = witness_clear(vec, rows, window, seed=seed + t)
                    if clear is not None:
                        real += clear.tolist()
                if every is not None:
                    r = one_step_risk(shield, obs, actions)  # [M, copies]
                result = vec.step(actions)
                violated[low:high, t] = active & (result.cost > 0).any(axis=1)
                if every is not None:
                    worst, mean = r.max(axis=0), r.mean(axis=0)
                    rows = np.flatnonzero(active & (worst > NEAR))
                    near += zip(
                        worst[rows].tolist(),
                        mean[rows].tolist(),
                        violated[low + rows, t].tolist(),
                        strict=True,
                    )
                active &= ~(result.terminated.any(axis=1) | result.truncated.any(axis=1))
                if not active.any():
                    break
                obs = result.obs
                step += 1
        finally:
            vec.close()
    bad = np.flatnonzero(violated.any(axis=1))
    onset = violated.argmax(axis=1)
    seen, peak = [], []
    for e in bad:
        lo = max(0, onset[e] - window + 1)
        seen.append(bool(fell[e, lo : onset[e] + 1].any()))
        peak.append(float(np.nanmax(raw[e, lo : onset[e] + 1])))
    executed = [q for q, _ in hot]
    least = [q for _, q in hot]
    row = {
        "env": config.env_name,
        "algo": config.algo,
        "run": int(config.run_idx),
        "horizon": horizon,
        "window": window,
        "allowance": float(shield.allowance),
        "certified": certificate is not None and certificate.certified,
        "episodes": episodes,
        "violations": len(bad),
        "fallback_share": float(fell.sum() / np.isfinite(raw).sum()),
        "median_q": float(np.nanmedian(raw)),
        "seen_coming": float(np.mean(seen)) if seen else None,
        "peak_q": _median(peak),
        "hot": len(hot),
        "hot_executed_q": _median(executed),
        "hot_least_q": _median(least),
        "hot_way_out": float(np.mean(np.array(least) <= shield.allowance)) if hot else None,
        "hot_real_way_out": float(np.mean(real)) if real else None,
        "exhaustive": every is not None,
        "near": len(near) if every is not None else None,
        "near_worst_r": float(np.mean([n[0] for n in near])) if near else None,
        "near_mean_r": float(np.mean([n[1] for n in near])) if near else None,
        "near_violated": float(np.mean([n[2] for n in near])) if near else None,
    }
    print(row, file=sys.stderr, flush=True)
    return row


def _cell(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render_markdown(results: Mapping[str, Any]) -> str:
    """The shield_traps section: one row per run."""
    return "\n".join(
        [
            ran(results),
            "",
            f"Each trained shield run of `{results['results']}` deployed at its deployed "
            f"allowance on {results['episodes']} episodes of its constraint horizon H from "
            f"reset seed {results['first_seed']:,} on (`src.seeds.TUNING`, spent); q: the "
            "models' risk of the executed joint action over the shield's horizon (module "
            "docstring of `benchmarks/shield_traps.py`).",
            "",
            *table(
                "env | algo | run | allowance | certified | violating | fell back | median q | "
                "seen coming | peak q before | fallbacks q > 0.1 | their q | least q of all "
                "joint actions | with a way out | witness's way out | r > 0.05 | worst r | "
                "mean r | violated at the step",
                "lllrlrrrrrrrrrrrrrr",
                (
                    f"{r['env']} | {r['algo']} | {r['run']} | {r['allowance']:g} | "
                    f"{'yes' if r['certified'] else 'no'} | "
                    f"{r['violations']}/{r['episodes']} | {r['fallback_share']:.3f} | "
                    f"{r['median_q']:.4f} | {_cell(r['seen_coming'], 2)} | "
                    f"{_cell(r['peak_q'])} | {r['hot'] if r['exhaustive'] else '–'} | "
                    f"{_cell(r['hot_executed_q'])} | {_cell(r['hot_least_q'])} | "
                    f"{_cell(r['hot_way_out'], 2)} | {_cell(r.get('hot_real_way_out'), 2)} | "
                    f"{_cell(r.get('near'), 0)} | {_cell(r.get('near_worst_r'))} | "
                    f"{_cell(r.get('near_mean_r'))} | {_cell(r.get('near_violated'))}"
                    for r in results["rows"]
                ),
            ),
            "",
            "- Violating: episodes with a violation within H. Fell back: the share of all "
            "decisions where nothing the shield looked at was within the allowance. Seen "
            "coming: the share of violating episodes with a fallback in the shield's horizon "
            "up to the first violation; peak q before: the median over those episodes of the "
            "largest q there.",
            "- Fallbacks q > 0.1: decisions that fell back with q above 0.1; their q: its "
            "median; least q of all joint actions: the median of the least q over every joint "
            "action of the team by the same models; with a way out: the share of those "
            "decisions where that least q was within the allowance (a joint action the models "
            "judge safe existed and was not taken). Witness's way out: the share of those "
            "decisions from whose state, in the true env, the task's witness team went the "
            "shield's horizon without a violation (a way out in reality).",
            f"- r > {NEAR}: decisions whose one-step risk of the executed joint action (the "
            "models' probability of a violation at that step, the first term of q) was above "
            f"{NEAR} by the worst member; worst r, mean r: its mean by the worst member and by "
            "the members' mean; violated at the step: the share of those steps that violated "
            "in the real env.",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Deploy every trained shield of `--results` at its allowance; print, save, record."""
    parser = arguments(__doc__, write=True)
    parser.add_argument("--results", type=Path, required=True, help="a results folder")
    parser.add_argument("--episodes", type=positive_int, default=100, help="episodes per run")
    parser.add_argument(
        "--allowance", type=allowance, help="deploy every shield at this (default: its own)"
    )
    args = parser.parse_args(argv)
    return record_shield_runs(
        "shield_traps",
        argv,
        parser,
        lambda run: [trace(run, args.episodes, args.allowance)],
        first_seed=TUNING.first + TRAPS_SHIFT,
        render=render_markdown,
    )


if __name__ == "__main__":
    raise SystemExit(main())
