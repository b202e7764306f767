"""The shield's throughput and arithmetic efficiency on `hazard_grid`.

Measures, with torch on one thread:

- env-steps/s of rollout collection for `ippo` and for `shield` (armed, K = 256, L = 5,
  16 copies, 2 agents), the shield's models first fitted on one passive rollout;
- the arithmetic rate of the shield's imagination: the FLOPs of every matmul it runs (world
  model, opponent model, policy) per second of filter time, as a fraction of what plain torch
  matmuls reach at exactly the same shapes (the same sequence of `baddbmm`/`addmm` calls on
  preallocated inputs, timed alone). 1.0 would mean the shield spends all its time in matmuls;
- the shield's cost at the default configuration (`config/config.yaml` base values with the
  ShieldConfig defaults): filter seconds per armed update on `hazard_grid` and `intersection`.

Run: `python -m benchmarks.shield` (or `make bench`); `--quick` for a smoke run. Results go to
`benchmarks/out/shield.json` and the section between the shield markers of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import write_section
from src.algos.ippo import IPPO
from src.algos.seeding import copy_seeds
from src.algos.shield.trainer import ShieldedIPPO
from src.algos.train import build_trainer, make_vector_env_for
from src.config.run import RunConfig, make_run_config
from src.config.shield import ShieldConfig

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
TARGET = 0.5  # fraction of the matmul rate the shield's imagination must reach


def make_trainer(
    algo: str,
    *,
    env_name: str = "hazard_grid",
    n_agents: int = 2,
    num_envs: int = 16,
    rollouts: int = 16,
    shield_params: dict[str, Any] | None = None,
    seed: int = 0,
) -> IPPO:
    """A trainer whose shield (if any) arms after one update."""
    config = make_run_config(
        env_name=env_name,
        algo=algo,
        num_envs=num_envs,
        n_agents=n_agents,
        timesteps=num_envs * rollouts * 100,
        rollouts=rollouts,
        learning_epochs=1,
        mini_batches=1,
        max_risk=0.1,
        seed_offset=seed,
        shield_patience=1,
        env_params={"max_steps": 100},
        algo_params=dict(shield_params or {}) if algo == "shield" else {},
    )
    trainer = build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))
    # `train()` resets the env on its first call; collection is timed here without it.
    trainer._obs = trainer.env.reset(seed=copy_seeds(trainer.seed, num_envs))
    return trainer


def collection_rate(trainer: IPPO, repeats: int) -> tuple[float, float]:
    """(env-steps/s, seconds) of `repeats` rollout collections."""
    started = time.perf_counter()
    for _ in range(repeats):
        trainer.collect_rollout()
    seconds = time.perf_counter() - started
    return repeats * trainer.steps_per_update / seconds, seconds


def arm(trainer: ShieldedIPPO) -> None:
    """One passive rollout, fit the models on it, arm the shield."""
    trainer.collect_rollout()
    trainer.after_update(0)
    if not trainer.armed:
        raise RuntimeError("the shield did not arm after one update")


def layer_flops(shapes: Sequence[tuple[int, int]]) -> int:
    """Multiply-add FLOPs of one row through layers of the given (fan_in, fan_out)."""
    return sum(2 * fan_in * fan_out for fan_in, fan_out in shapes)


def policy_shapes(trainer: IPPO) -> list[tuple[int, int]]:
    """(fan_in, fan_out) of the actor's Linear layers."""
    return [
        (m.in_features, m.out_features) for m in trainer.net.actor if isinstance(m, torch.nn.Linear)
    ]


def record_calls(trainer: ShieldedIPPO) -> Counter:
    """Count the (blocks, rollouts) of every batched rollout the shield runs from now on."""
    calls: Counter = Counter()
    shield = trainer.shield
    original = shield._count_violations

    def recorded(joint_obs: torch.Tensor, focal: torch.Tensor, first: torch.Tensor, k: int) -> Any:
        calls[(int(joint_obs.shape[0]), int(k))] += 1
        return original(joint_obs, focal, first, k)

    shield._count_violations = recorded  # type: ignore[method-assign]
    return calls


def matmul_seconds(trainer: ShieldedIPPO, calls: Counter, repeats: int) -> float:
    """Time plain torch matmuls with the shapes of the recorded rollouts (same op sequence)."""
    wm, om = trainer.world_model, trainer.opponent_model
    members, a = wm.ensemble_size, trainer.env.n_agents
    lookahead = trainer.shield_cfg.lookahead
    wm_w = [w.detach().clone() for w in wm.weights]
    wm_b = [b.detach().clone() for b in wm.biases]
    om_w = [w.detach().clone() for w in om.weights]
    om_b = [b.detach().clone() for b in om.biases]
    pol = [m for m in trainer.net.actor if isinstance(m, torch.nn.Linear)]
    pol_w = [m.weight.detach().t() for m in pol]
    pol_b = [m.bias.detach().clone() for m in pol]
    total = 0.0
    for (blocks, k), count in calls.items():
        rows = blocks * k
        per_member = rows // members
        wm_in = [torch.randn(members, per_member, w.shape[1]) for w in wm_w]
        wm_out = [torch.empty(members, per_member, w.shape[2]) for w in wm_w]
        om_in = [torch.randn(rows * a, w.shape[0]) for w in om_w]
        om_out = [torch.empty(rows * a, w.shape[1]) for w in om_w]
        pol_in = [torch.randn(rows, w.shape[0]) for w in pol_w]
        pol_out = [torch.empty(rows, w.shape[1]) for w in pol_w]

        def one_rollout_batch(
            om_in: list = om_in,
            om_out: list = om_out,
            pol_in: list = pol_in,
            pol_out: list = pol_out,
            wm_in: list = wm_in,
            wm_out: list = wm_out,
        ) -> None:
            for depth in range(lookahead):
                for x, w, b, o in zip(om_in, om_w, om_b, om_out, strict=True):
                    torch.addmm(b, x, w, out=o)
                if depth > 0:
                    for x, w, b, o in zip(pol_in, pol_w, pol_b, pol_out, strict=True):
                        torch.addmm(b, x, w, out=o)
                for x, w, b, o in zip(wm_in, wm_w, wm_b, wm_out, strict=True):
                    torch.baddbmm(b, x, w, out=o)

        one_rollout_batch()
        started = time.perf_counter()
        for _ in range(repeats):
            one_rollout_batch()
        total += count * (time.perf_counter() - started) / repeats
    return total


def record_filter_inputs(trainer: ShieldedIPPO) -> list[tuple[Any, ...]]:
    """Keep a copy of the inputs of every filter call the trainer makes from now on."""
    inputs: list[tuple[Any, ...]] = []
    shield = trainer.shield
    original = shield.filter

    def recorded(obs: Any, proposed: Any, logits: torch.Tensor, step: Any) -> Any:
        inputs.append((obs.copy(), proposed.copy(), logits.clone(), step.copy()))
        return original(obs, proposed, logits, step)

    shield.filter = recorded  # type: ignore[method-assign]
    return inputs


def replay_filter(trainer: ShieldedIPPO, inputs: list[tuple[Any, ...]], state: torch.Tensor) -> Any:
    """Run the recorded filter calls again from the same generator state; the shield's stats."""
    shield = trainer.shield
    shield.generator.set_state(state)
    shield.stats = type(shield.stats)()
    for obs, proposed, logits, step in inputs:
        shield.filter(obs, proposed, logits, step)
    return shield.stats


def efficiency(k: int, lookahead: int, repeats: int, seed: int) -> dict[str, Any]:
    """Env-steps/s of ippo and shield and the shield's arithmetic rate vs plain matmuls.

    The arithmetic rate replays the filter calls of one recorded rollout from the same
    generator state (identical work every time), alternating with the plain-matmul replay of
    the same shapes, and keeps the fastest of `repeats` passes of each, so a load spike from
    other processes on a shared machine hits neither side unevenly.
    """
    params = {"rollout_count": k, "lookahead": lookahead}
    ippo = make_trainer("ippo", seed=seed)
    ippo.collect_rollout()
    ippo_rate, _ = collection_rate(ippo, repeats)
    shielded = make_trainer("shield", shield_params=params, seed=seed)
    assert isinstance(shielded, ShieldedIPPO)
    arm(shielded)
    inputs = record_filter_inputs(shielded)
    state = shielded.shield.generator.get_state()
    shield_rate, seconds = collection_rate(shielded, 1)
    filter_share = shielded.shield.stats.seconds / seconds
    calls = record_calls(shielded)
    stats = replay_filter(shielded, inputs, state)
    recorded_calls = Counter(calls)
    flops = (
        stats.wm_rows * layer_flops(shielded.world_model.layer_shapes)
        + stats.om_rows * layer_flops(shielded.opponent_model.layer_shapes)
        + stats.policy_rows * layer_flops(policy_shapes(shielded))
    )
    filter_seconds, mm_seconds = [], []
    for _ in range(repeats):
        filter_seconds.append(replay_filter(shielded, inputs, state).seconds)
        mm_seconds.append(matmul_seconds(shielded, recorded_calls, repeats=1))
    decisions = max(stats.decisions, 1)
    return {
        "num_envs": shielded.num_envs,
        "n_agents": shielded.env.n_agents,
        "rollout_count": k,
        "lookahead": lookahead,
        "ensemble_size": shielded.shield_cfg.ensemble_size,
        "wm_hidden": list(shielded.shield_cfg.wm_hidden),
        "screen_fraction": shielded.shield_cfg.screen_fraction,
        "ippo_steps_per_s": ippo_rate,
        "shield_steps_per_s": shield_rate,
        "filter_share_of_collection": filter_share,
        "filter_calls": len(inputs),
        "interventions_per_decision": stats.interventions / decisions,
        "no_safe_per_decision": stats.no_safe_action / decisions,
        "world_model_rows": stats.wm_rows,
        "gflop": flops / 1e9,
        "filter_seconds": min(filter_seconds),
        "shield_gflops_per_s": flops / min(filter_seconds) / 1e9,
        "matmul_seconds_same_shapes": min(mm_seconds),
        "matmul_gflops_per_s": flops / min(mm_seconds) / 1e9,
        "fraction_of_matmul_rate": min(mm_seconds) / min(filter_seconds),
    }


def default_cost(env_name: str, n_agents: int, repeats: int, seed: int) -> dict[str, Any]:
    """Filter seconds per armed update with the default workflow config on one env."""
    import yaml

    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["base"]
    trainer = make_trainer(
        "shield",
        env_name=env_name,
        n_agents=n_agents,
        num_envs=base["num_envs"],
        rollouts=base["rollouts"],
        seed=seed,
    )
    assert isinstance(trainer, ShieldedIPPO)
    arm(trainer)
    rate, _ = collection_rate(trainer, repeats)
    updates = base["timesteps"] // (base["num_envs"] * base["rollouts"])
    armed_updates = max(0, updates - base["shield_patience"])
    per_update = trainer.shield.stats.seconds / repeats
    defaults = ShieldConfig.__dataclass_fields__
    return {
        "env": env_name,
        "n_agents": n_agents,
        "num_envs": base["num_envs"],
        "rollout_count": defaults["rollout_count"].default,
        "lookahead": defaults["lookahead"].default,
        "filter_seconds_per_update": per_update,
        "collect_steps_per_s": rate,
        "armed_updates": armed_updates,
        "projected_filter_seconds_per_run": per_update * armed_updates,
    }


def benchmark(*, k: int, lookahead: int, repeats: int, default_repeats: int) -> dict[str, Any]:
    """Every measurement of this module."""
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    started = time.perf_counter()
    result = {
        "efficiency": efficiency(k, lookahead, repeats, seed=0),
        "default": [
            default_cost("hazard_grid", 2, default_repeats, seed=0),
            default_cost("intersection", 3, default_repeats, seed=0),
        ],
    }
    result["machine"] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
        "seconds": time.perf_counter() - started,
    }
    return result


def render_markdown(r: dict[str, Any]) -> str:
    """The BENCHMARKS.md section."""
    e, m = r["efficiency"], r["machine"]
    met = "met" if e["fraction_of_matmul_rate"] >= TARGET else "NOT met"
    lines = [
        "## Shield",
        "",
        f"`python -m benchmarks.shield` (part of `make bench`) on {m['date']}: {m['cpus']} CPUs, "
        f"Python {m['python']}, torch {m['torch']}, one thread; load average "
        f"{m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after (shared machine), "
        f"{m['seconds']:.0f} s in total.",
        "",
        f"`hazard_grid`, {e['num_envs']} copies, {e['n_agents']} agents; shield armed with "
        f"K = {e['rollout_count']}, L = {e['lookahead']}, ensemble {e['ensemble_size']} x "
        f"{tuple(e['wm_hidden'])}, screening {e['screen_fraction']}, its models fitted on one "
        f"passive rollout; {e['filter_calls']} filter calls (one rollout of 16 steps). Rollout "
        "collection only (no policy update). Rates: fastest of the alternating passes.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| `ippo` env-steps/s | {e['ippo_steps_per_s']:,.0f} |",
        f"| `shield` env-steps/s | {e['shield_steps_per_s']:,.1f} |",
        f"| share of `shield` collection time spent in the filter | "
        f"{e['filter_share_of_collection']:.1%} |",
        f"| interventions / no safe action, per decision | "
        f"{e['interventions_per_decision']:.2f} / {e['no_safe_per_decision']:.2f} |",
        f"| matmul work of the imagination (world model, opponent model, policy) | "
        f"{e['gflop']:.1f} GFLOP |",
        f"| shield arithmetic rate (matmul FLOPs / filter seconds) | "
        f"{e['shield_gflops_per_s']:.2f} GFLOP/s |",
        f"| plain torch matmuls at the same shapes | {e['matmul_gflops_per_s']:.2f} GFLOP/s |",
        f"| **fraction of the matmul rate** | **{e['fraction_of_matmul_rate']:.2f}** |",
        "",
        f"- Fraction of the matmul rate >= {TARGET}: {met}.",
        "",
        "Default configuration (`config/config.yaml` base: 8 copies, 64 steps per update; "
        "ShieldConfig defaults), filter seconds per armed update with models fitted on one "
        "rollout (every candidate fails its screening), projected over a run. With trained "
        "models more candidates pass screening and need all K rollouts: the whole runs below "
        "measure the real cost.",
        "",
        "| env | agents | K base | L | filter s / update | armed updates | filter s / run |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for d in r["default"]:
        lines.append(
            f"| {d['env']} | {d['n_agents']} | {d['rollout_count']} | {d['lookahead']} | "
            f"{d['filter_seconds_per_update']:.2f} | {d['armed_updates']} | "
            f"{d['projected_filter_seconds_per_run']:.0f} |"
        )
    lines += comparison_markdown()
    return "\n".join(lines)


def comparison_markdown(path: Path = OUT / "shield_vs_baselines.json") -> list[str]:
    """The latest `benchmarks.shield_vs_baselines` table, if that script has been run."""
    if not path.exists():
        return []
    saved = json.loads(path.read_text())
    date = saved.get("date") or time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime)
    )
    return [
        "",
        f"Whole training runs at the default configuration (`python -m "
        f"benchmarks.shield_vs_baselines`, {date}; not rerun by `make bench`): episodes that "
        "start after the shield armed (the same window for every algorithm), same seeds.",
        "",
        saved["markdown"],
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, save JSON, update BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollout-count", type=int, default=256)
    parser.add_argument("--lookahead", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of each kind")
    parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    args = parser.parse_args(list(argv) if argv is not None else [])
    repeats, default_repeats = (1, 1) if args.quick else (args.repeats, 2)
    results = benchmark(
        k=args.rollout_count,
        lookahead=args.lookahead,
        repeats=repeats,
        default_repeats=default_repeats,
    )
    markdown = render_markdown(results)
    print(markdown)
    OUT.mkdir(parents=True, exist_ok=True)
    name = "shield_quick.json" if args.quick else "shield.json"
    tmp = OUT / f".{name}.tmp"
    tmp.write_text(json.dumps(results, indent=2, default=float) + "\n")
    os.replace(tmp, OUT / name)
    if not args.quick:
        write_section("shield", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
