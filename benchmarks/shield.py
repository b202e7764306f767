"""The shield's cost at the default configuration, on `hazard_grid` and `intersection`.

CPU seconds of this process on one thread, `config/config.yaml`'s run configs, against its
peers: the arithmetic share of its filter (every matmul of a replay of the filter's calls timed
alone), its training against `ippo` (one update of each in turn, split into collection, filter,
model fitting and the rest, next to the floor no shield at these models can skip), and its
evaluation with the shield on against off; the same for `shield_dec`, without split and floor.

Run: `python -m benchmarks.shield` (or `make bench`); `--quick` a smoke run. Results go to
`benchmarks/out/shield.json` and the shield section of BENCHMARKS.md.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import (
    AfterUpdate,
    Clock,
    CpuSplit,
    arguments,
    best_times,
    experiment,
    met,
    patch,
    play,
    positive_int,
    run_config,
    save_results,
    table,
)
from src import numerics
from src.algos.ippo import IPPO
from src.algos.networks import ActorCritic
from src.algos.policy import Actor
from src.algos.shield.assemble import load_shield
from src.algos.shield.budget import BudgetShield
from src.algos.shield.trainer import ShieldedIPPO
from src.algos.train import build_trainer, make_vector_env_for
from src.config.run import RunConfig
from src.core.logging import WARNING, configure_logging
from src.evaluation.episodes import horizon_summary
from src.seeds import copy_seeds

ENVS = ("hazard_grid", "intersection")
TRAIN_TARGET = 2.0  # shield training CPU time at most this multiple of ippo's
EVAL_TARGET = 5.0  # shield-on evaluation CPU time at most this multiple of shield-off
DEC_TRAIN_TARGET = 5.0  # the same for shield_dec (its agents judge the others' predicted actions)
DEC_EVAL_TARGET = 10.0
MATMULS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear")
NUMERICS_MATMULS = ("baddbmm", "bmm", "linear")
"""The products of `src.numerics` (their arguments in torch's order)."""


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run (None: the default experiment's own value)."""

    passive: int = 2  # rollouts the shield watches (fitting its models) before the filter replay
    filter_calls: int | None = None  # filter calls replayed (None: every call of one rollout)
    repeats: int = 5  # timed passes of the filter replay and of the matmul replay
    patience: int | None = None  # watching updates before the shield arms in training
    armed_updates: int = 24  # training updates measured after the shield armed
    eval_episodes: int | None = None  # evaluation episodes (`final_policy_eval_episodes`)
    eval_steps: int | None = None  # steps per evaluation episode (the largest horizon)
    eval_repeats: int = 2  # timed passes of each evaluation mode
    num_envs: int | None = None  # env copies in training
    rollouts: int | None = None  # steps per copy and update

    def run_config(self, experiment: Mapping[str, Any], env: str, algo: str) -> dict[str, Any]:
        """Run 0's config of (`env`, `algo`) in `experiment` at these sizes."""
        return run_config(
            experiment,
            env,
            algo,
            shield_patience=self.patience,
            num_envs=self.num_envs,
            rollouts=self.rollouts,
        )


FULL = Sizes()
QUICK = Sizes(
    filter_calls=8, repeats=2, patience=1, armed_updates=2, eval_episodes=20, eval_repeats=1
)

# ------------------------------------------------------------------ trainers and their shields


def make_trainer(config: Mapping[str, Any]) -> IPPO:
    """The run's trainer on its env, the env reset as `train()` would on its first call."""
    trainer = build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))
    trainer._obs = trainer.env.reset(seed=copy_seeds(trainer.seed, trainer.num_envs))
    return trainer


class _Pause(Exception):
    """Raised after one update to return from `IPPO.train` (a later call resumes)."""


def _pause(trainer: IPPO) -> None:
    raise _Pause


def train_one_update(trainer: IPPO) -> float:
    """Run the trainer's next update through `train()`; its CPU seconds."""
    started = time.process_time()
    with suppress(_Pause):
        trainer.train(callbacks=[AfterUpdate(_pause)], progress=False)
    return time.process_time() - started


def _shield(trainer: IPPO, coordination: str) -> BudgetShield:
    """The trainer's shield, which must be the shield of this `coordination`."""
    shield = getattr(trainer, "shield", None)
    if not isinstance(shield, BudgetShield) or shield.config.coordination != coordination:
        raise RuntimeError(f"{trainer.config.env_name}: not the {coordination} shield")
    return shield


@dataclass
class Stages:
    """How far the filter went, counted over its calls (copies are (copy, step) decisions)."""

    calls: int = 0
    decisions: int = 0
    one_change: int = 0
    """Decisions whose proposal failed, so that the one-agent changes were judged."""
    searched: int = 0
    """Decisions that went on to the search (no one-agent change passed)."""
    overridden: int = 0
    """Decisions whose executed joint action differs from the proposal."""

    def shares(self) -> dict[str, float]:
        """The counts per decision."""
        n = max(self.decisions, 1)
        return {
            "one_change_share": self.one_change / n,
            "searched_share": self.searched / n,
            "overridden_share": self.overridden / n,
        }


@contextmanager
def count_stages(shield: BudgetShield) -> Iterator[Stages]:
    """Count the stages of every filter call of `shield` inside the block."""
    stages = Stages()
    filter_, one_change = shield.filter, shield._one_change

    def counted_filter(obs: Any, proposed: Any, logits: Any, step: Any) -> Any:
        executed, intervened = filter_(obs, proposed, logits, step)
        stages.calls += 1
        stages.decisions += len(proposed)
        stages.searched += int(np.isfinite(shield.last.safest).sum())
        stages.overridden += int(np.asarray(intervened).any(axis=1).sum())
        return executed, intervened

    def counted_one_change(joint: Any, proposed: Any, logits: Any, remaining: Any) -> Any:
        stages.one_change += len(proposed)
        return one_change(joint, proposed, logits, remaining)

    undo = [patch(shield, "filter", counted_filter)]
    undo.append(patch(shield, "_one_change", counted_one_change))
    try:
        yield stages
    finally:
        for step in reversed(undo):
            step()


def record_filter_inputs(shield: BudgetShield) -> tuple[list[tuple[Any, ...]], Callable[[], None]]:
    """Keep a copy of the inputs of every later filter call; returns them and an undo."""
    inputs: list[tuple[Any, ...]] = []
    original = shield.filter

    def recorded(obs: Any, proposed: Any, logits: torch.Tensor, step: Any) -> Any:
        inputs.append((obs.copy(), proposed.copy(), logits.clone(), step.copy()))
        return original(obs, proposed, logits, step)

    return inputs, patch(shield, "filter", recorded)


def replay_filter(shield: BudgetShield, inputs: Sequence[tuple[Any, ...]]) -> None:
    """Run the recorded filter calls again (the filter samples nothing)."""
    shield.reset(len(inputs[0][1]), seed=0)
    for obs, proposed, logits, step in inputs:
        shield.filter(obs, proposed, logits, step)


def proposal_seconds(shield: BudgetShield, inputs: Sequence[tuple[Any, ...]]) -> float:
    """CPU seconds of judging each recorded call's proposals once: q of the proposed joint
    action of every copy, one batched model call per step, nothing searched. The shield must
    at least do this (the executed action's risk is computed exactly), so it is the least
    filter work per step at these models."""
    started = time.process_time()
    with torch.inference_mode():
        for obs, proposed, _, _ in inputs:
            e = len(proposed)
            joint = torch.as_tensor(obs, dtype=torch.float32).reshape(e, -1)
            remaining = torch.full((e,), float(shield.config.horizon))
            shield.raw_risk(joint, torch.from_numpy(np.asarray(proposed)), remaining)
    return time.process_time() - started


# ------------------------------------------------------------------ the filter's arithmetic


@dataclass(frozen=True)
class Matmul:
    """One recorded matmul: its op, the shapes and strides of its tensor arguments."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    strides: tuple[tuple[int, ...], ...]
    library: str = "torch"
    """Where it ran: torch's dispatcher, or `numerics` (OpenBLAS, `src.numerics`)."""

    @property
    def flops(self) -> int:
        """2 x the multiply-adds of the product (the bias additions are not counted)."""
        if self.op == "linear":  # input [..., k], weight [m, k]
            x, w = self.shapes[0], self.shapes[1]
            return 2 * math.prod(x[:-1]) * x[-1] * w[0]
        x, w = self.shapes[-2], self.shapes[-1]  # the two factors come last
        x = (1, *x) if len(x) == 1 else x
        w = (*w, 1) if len(w) == 1 else w
        batch = torch.broadcast_shapes(torch.Size(x[:-2]), torch.Size(w[:-2]))
        return 2 * math.prod(batch) * x[-2] * x[-1] * w[-1]


class MatmulRecorder(TorchDispatchMode):
    """Records every matmul that reaches torch's dispatcher inside the block, and every product
    of `src.numerics` (which runs in OpenBLAS, out of the dispatcher's sight)."""

    def __init__(self) -> None:
        """Nothing recorded yet."""
        super().__init__()
        self.calls: list[Matmul] = []
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> MatmulRecorder:
        """Record from here on."""
        for name in NUMERICS_MATMULS:
            function = getattr(numerics, name)

            def recorded(*args: Any, _name: str = name, _f: Any = function, **kwargs: Any) -> Any:
                self._record(_name, args, "numerics")
                return _f(*args, **kwargs)

            self._undo.append(patch(numerics, name, recorded))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        """Stop recording."""
        super().__exit__(*exc)
        while self._undo:
            self._undo.pop()()

    def _record(self, op: str, args: Sequence[Any], library: str) -> None:
        """Append the call of `op` on the tensors among `args`."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        shapes = tuple(tuple(t.shape) for t in tensors)
        strides = tuple(tuple(t.stride()) for t in tensors)
        self.calls.append(Matmul(op=op, shapes=shapes, strides=strides, library=library))

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Record a matmul's argument shapes, then run the op."""
        if func.overloadpacket.__name__ in MATMULS:
            self._record(func.overloadpacket.__name__, args, "torch")
        return func(*args, **(kwargs or {}))


def _span(shape: Sequence[int], stride: Sequence[int]) -> int:
    """Storage elements a tensor of this shape and these strides reaches."""
    if not all(shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def matmul_replay(calls: Sequence[Matmul], seed: int = 0) -> Callable[[], None]:
    """A function that runs `calls` in order on preallocated inputs and outputs.

    Inputs keep the recorded strides (an expanded bias stays expanded). Arguments in the same
    role (op, position, rank, last dimension) share one buffer, as the filter's workspaces
    do, so the memory is that of the largest call of each role. `linear` runs as the `addmm`
    it stands for.
    """
    plans: list[tuple[Callable[..., Any], list[tuple[Any, ...]], tuple[Any, ...]]] = []
    spans: dict[tuple[Any, ...], int] = defaultdict(int)
    for call in calls:
        shapes, strides, op = list(call.shapes), list(call.strides), call.op
        if call.library == "numerics":  # the same product on OpenBLAS, `out=` where it takes one
            function, op = getattr(numerics, op), f"numerics.{op}"
        else:
            if op == "linear":  # addmm(bias, x as 2-d, weight.t())
                x, w = shapes[0], shapes[1]
                bias = (shapes[2], strides[2]) if len(shapes) > 2 else ((w[0],), (1,))
                shapes = [bias[0], (math.prod(x[:-1]), x[-1]), (w[1], w[0])]
                strides = [bias[1], (x[-1], 1), (strides[1][1], strides[1][0])]
                op = "addmm"
            function = getattr(torch, op)
        if op == "numerics.linear":
            out_shape = (*shapes[0][:-1], shapes[1][0])
        else:
            meta = [
                torch.empty_strided(sh, st, device="meta")
                for sh, st in zip(shapes, strides, strict=True)
            ]
            out_shape = tuple(getattr(torch, op.removeprefix("numerics."))(*meta).shape)
        args = []
        for position, (sh, st) in enumerate(zip(shapes, strides, strict=True)):
            key = (op, position, len(sh), sh[-1] if sh else 0)
            spans[key] = max(spans[key], _span(sh, st))
            args.append((key, sh, st))
        out_strides = _contiguous_strides(out_shape)
        key = (op, "out", len(out_shape), out_shape[-1] if out_shape else 0)
        spans[key] = max(spans[key], _span(out_shape, out_strides))
        plans.append((function, args, (key, out_shape, out_strides)))
    generator = torch.Generator().manual_seed(seed)
    buffers = {key: torch.randn(max(span, 1), generator=generator) for key, span in spans.items()}
    steps: list[Callable[[], Any]] = []
    for function, args, (key, shape, stride) in plans:
        tensors = tuple(buffers[k].as_strided(sh, st) for k, sh, st in args)
        if function is numerics.bmm:  # no `out`: it returns OpenBLAS's own array
            steps.append(lambda f=function, a=tensors: f(*a))
        else:
            out = buffers[key].as_strided(shape, stride)
            steps.append(lambda f=function, a=tensors, o=out: f(*a, out=o))

    def run() -> None:
        for step in steps:
            step()

    return run


def filter_arithmetic(experiment: Mapping[str, Any], env_name: str, sizes: Sizes) -> dict[str, Any]:
    """FLOPs and arithmetic share of the filter, models fitted on `sizes.passive` rollouts."""
    trainer = make_trainer(
        replace(sizes, patience=sizes.passive).run_config(experiment, env_name, "shield")
    )
    shield = _shield(trainer, "central")
    for update in range(sizes.passive):
        trainer.collect_rollout()
        trainer.after_update(update)
    if not trainer.armed:
        raise RuntimeError(f"{env_name}: the shield did not arm after {sizes.passive} updates")
    inputs, undo = record_filter_inputs(shield)
    trainer.collect_rollout()
    undo()
    inputs = inputs[: sizes.filter_calls] if sizes.filter_calls else inputs
    with torch.inference_mode(), MatmulRecorder() as recorder:
        replay_filter(shield, inputs)
    with count_stages(shield) as stages:
        replay_filter(shield, inputs)
    matmuls = matmul_replay(recorder.calls)
    matmuls()  # allocations and first-touch outside the timed passes
    best = best_times(
        {"filter": lambda: replay_filter(shield, inputs), "matmul": matmuls}, repeats=sizes.repeats
    )
    flops = sum(call.flops for call in recorder.calls)
    return {
        "env": env_name,
        "joint_actions": shield.n_actions**shield.n_agents,
        "filter_calls": len(inputs),
        "decisions": stages.decisions,
        **stages.shares(),
        "matmul_calls": len(recorder.calls),
        "matmul_ops": dict(Counter(call.op for call in recorder.calls)),
        "gflop": flops / 1e9,
        "filter_seconds": best["filter"],
        "filter_ms_per_call": 1e3 * best["filter"] / len(inputs),
        "filter_gflops_per_s": flops / best["filter"] / 1e9,
        "matmul_seconds": best["matmul"],
        "matmul_gflops_per_s": flops / best["matmul"] / 1e9,
        "arithmetic_fraction": best["matmul"] / best["filter"],
    }


# ------------------------------------------------------------------ training and evaluation


def training_cost(
    experiment: Mapping[str, Any], env_name: str, sizes: Sizes, algo: str = "shield"
) -> tuple[dict[str, Any], ShieldedIPPO]:
    """CPU seconds of the shield `algo` against two `ippo` runs over the same updates, one
    update of each in turn; for the central `shield`, the split of its armed updates and its
    floor. Returns the figures and the shield's trainer (trained that far)."""
    central = algo == "shield"
    ippo = [make_trainer(sizes.run_config(experiment, env_name, "ippo")) for _ in range(2)]
    shielded = make_trainer(sizes.run_config(experiment, env_name, algo))
    shield = _shield(shielded, "central" if central else "decentralised")
    patience = shielded.shield_cfg.shield_patience
    updates = patience + sizes.armed_updates
    if updates > shielded.num_updates:
        raise ValueError(f"{updates} updates asked, the run has {shielded.num_updates}")
    split = CpuSplit()
    split.wrap(shielded, "after_update", "models")
    split.wrap(shield, "filter")
    if central:
        split.wrap(shielded, "collect_rollout", "collect")
        for run in ippo:
            split.wrap(run, "collect_rollout", "ippo_collect")
    ippo_seconds, shield_seconds = np.zeros((2, updates)), np.zeros(updates)
    parts, armed_inputs, stop_recording = [], [], None
    try:
        with count_stages(shield) as stages:
            try:
                for update in range(updates):
                    if central and update == patience:  # the armed filter inputs, for the floor
                        armed_inputs, stop_recording = record_filter_inputs(shield)
                    ippo_seconds[0, update] = train_one_update(ippo[0])
                    shield_seconds[update] = train_one_update(shielded)
                    ippo_seconds[1, update] = train_one_update(ippo[1])
                    parts.append(split.snapshot())
            finally:
                if stop_recording is not None:
                    stop_recording()
    finally:
        split.restore()
    reference, armed = ippo_seconds.mean(axis=0), slice(patience, updates)
    before = parts[patience - 1] if patience > 0 else {}
    spent = defaultdict(float, {k: v - before.get(k, 0.0) for k, v in parts[-1].items()})
    ippo_armed, shield_armed = float(reference[armed].sum()), float(shield_seconds[armed].sum())
    result = {
        "env": env_name,
        "patience": patience,
        "armed_updates": sizes.armed_updates,
        "run_updates": shielded.num_updates,
        "ippo_seconds": float(reference.sum()),
        "shield_seconds": float(shield_seconds.sum()),
        "ratio_all": float(shield_seconds.sum() / reference.sum()),
        "ippo_armed_seconds": ippo_armed,
        "shield_armed_seconds": shield_armed,
        "ratio_armed": shield_armed / ippo_armed,
        "armed_filter_seconds": spent["filter"],
        "armed_model_seconds": spent["models"],
        **stages.shares(),
    }
    if central:
        # The floor: ippo's update plus what no shield at these models can skip.
        judged = proposal_seconds(shield, armed_inputs)
        stored = max(0.0, spent["collect"] - spent["filter"] - spent["ippo_collect"] / 2)
        result |= {
            "ippo_armed_collect_seconds": spent["ippo_collect"] / 2,
            "armed_proposal_seconds": judged,
            "floor_judged": (ippo_armed + judged) / ippo_armed,
            "floor_stored": (ippo_armed + judged + stored) / ippo_armed,
            "armed_collect_seconds": spent["collect"] - spent["filter"],
            "armed_rest_seconds": shield_armed - spent["collect"] - spent["models"],
        }
    return result, shielded


def evaluation_cost(trainer: ShieldedIPPO, sizes: Sizes, *, floor: bool = True) -> dict[str, Any]:
    """CPU seconds of the trained shield policy's evaluation with the shield on and off; with
    `floor`, also the central shield's floor (its proposals judged once)."""
    state = trainer.policy_state()
    config = RunConfig.from_dict(state["config"])
    settings = config.evaluation
    episodes = sizes.eval_episodes or settings.episodes
    steps = sizes.eval_steps or settings.max_horizon
    batch_size = min(settings.final_policy_eval_num_envs, episodes)
    seeds = [settings.first_seed(config.run_idx) + i for i in range(episodes)]
    net = ActorCritic.from_policy_state(state)
    shield = load_shield(state, config, net=net)
    if not isinstance(shield, BudgetShield):
        raise RuntimeError(f"{config.env_name}: the trained shield is not the shield")
    actors = {
        "off": Actor(net=net, config=config),
        "on": Actor(net=net, config=config, action_filter=shield),
    }
    batches: dict[str, Any] = {}

    def run(mode: str) -> None:
        batches[mode] = play(actors[mode], config, seeds, max_steps=steps, batch_size=batch_size)

    # Every pass of a mode plays the same episodes with the same actions: the counts of the
    # passes are equal, and counting costs microseconds per call.
    with count_stages(shield) as stages:
        best = best_times({mode: partial(run, mode) for mode in actors}, repeats=sizes.eval_repeats)
    horizon = min(config.constraint_horizon or steps, steps)
    result = {
        "env": config.env_name,
        "episodes": episodes,
        "max_steps": steps,
        "batch_size": batch_size,
        "horizon": horizon,
        "confidence": settings.final_policy_eval_confidence,
        "off_seconds": best["off"],
        "on_seconds": best["on"],
        "ratio": best["on"] / best["off"],
        **stages.shares(),
    }
    for mode, batch in batches.items():
        # P(violation within the constraint's horizon), its interval's upper end, the mean
        # return within it: the evaluation's own summary of the mode's episodes.
        summary = horizon_summary(batch, [horizon], confidence=result["confidence"]).iloc[0]
        result[f"mean_length_{mode}"] = float(batch.length.mean())
        result[f"violating_{mode}"] = float(summary["p_violation"])
        result[f"violating_high_{mode}"] = float(summary["ci_high"])
        result[f"return_{mode}"] = float(summary["mean_return"])
    if floor:
        inputs, undo = record_filter_inputs(shield)  # an untimed pass: the floor's filter calls
        try:
            run("on")
        finally:
            undo()
        judged = proposal_seconds(shield, inputs)
        result.update(proposal_seconds=judged, floor=(best["off"] + judged) / best["off"])
    return result


# ------------------------------------------------------------------ the whole benchmark


def benchmark(
    sizes: Sizes = FULL, *, config: Mapping[str, Any] | None = None, envs: Sequence[str] = ENVS
) -> dict[str, Any]:
    """Every measurement of this module, per env, on the default experiment (or `config`)."""
    config = config if config is not None else experiment()
    torch.set_num_threads(1)
    clock = Clock()
    result: dict[str, Any] = {
        "sizes": asdict(sizes),
        "config": {
            "base": {k: v for k, v in config["base"].items() if k != "use_wandb"},
            "env_params": {env: dict(config["env_params"][env]) for env in envs},
            "algo_params": dict(config.get("algo_params", {}).get("shield", {})),
            "shield": RunConfig.from_dict(run_config(config, envs[0], "shield")).shield.to_dict(),
        },
        "filter": [],
        "training": [],
        "evaluation": [],
        "decentralised": [],
    }
    for env_name in envs:
        result["filter"].append(filter_arithmetic(config, env_name, sizes))
        training, trainer = training_cost(config, env_name, sizes)
        result["training"].append(training)
        result["evaluation"].append(evaluation_cost(trainer, sizes))
        if "shield_dec" in config["algos"]:
            training, trainer = training_cost(config, env_name, sizes, "shield_dec")
            training["evaluation"] = evaluation_cost(trainer, sizes, floor=False)
            result["decentralised"].append(training)
    result["machine"] = clock.machine()
    return result


def targets(r: Mapping[str, Any]) -> list[str]:
    """One line per target and env: the measured ratio and whether the target is met."""
    lines = [
        f"- {t['env']}: shield training <= {TRAIN_TARGET:g}x ippo (armed updates): "
        f"{t['ratio_armed']:.2f}x, {met(t['ratio_armed'] <= TRAIN_TARGET)}; floor "
        f"{t['floor_judged']:.2f}x ({t['floor_stored']:.2f}x with the transitions stored), "
        f"leaving {TRAIN_TARGET - t['floor_stored']:.2f}x of ippo's update for the search and "
        "the model fits."
        for t in r["training"]
    ]
    lines += [
        f"- {e['env']}: shield-on evaluation <= {EVAL_TARGET:g}x shield-off: "
        f"{e['ratio']:.2f}x, {met(e['ratio'] <= EVAL_TARGET)}; floor {e['floor']:.2f}x."
        for e in r["evaluation"]
    ]
    lines += [
        f"- {d['env']}: shield_dec training <= {DEC_TRAIN_TARGET:g}x ippo (armed updates): "
        f"{d['ratio_armed']:.2f}x, {met(d['ratio_armed'] <= DEC_TRAIN_TARGET)}; shield-on "
        f"evaluation <= {DEC_EVAL_TARGET:g}x shield-off: {d['evaluation']['ratio']:.2f}x, "
        f"{met(d['evaluation']['ratio'] <= DEC_EVAL_TARGET)}."
        for d in r.get("decentralised", [])
    ]
    return lines


def render_markdown(r: Mapping[str, Any], *, command: str = "python -m benchmarks.shield") -> str:
    """The BENCHMARKS.md section."""
    m, c, s = r["machine"], r["config"], r["sizes"]
    base, shield = c["base"], c["shield"]
    overrides = ", ".join(f"{k} {v}" for k, v in c["algo_params"].items()) or "none"
    agents = ", ".join(f"{env} {p['n_agents']} agents" for env, p in c["env_params"].items())
    t0, e0 = r["training"][0], r["evaluation"][0]
    lines = [
        "## Shield",
        "",
        f"`{command}`{'' if '--quick' in command else ' (part of `make bench`)'} on "
        f"{m['date']}: {m['platform']}, {m['cpus']} CPUs ({m['processor']}), Python "
        f"{m['python']}, torch {m['torch']} on {m['torch_threads']} thread; load average "
        f"{m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after (shared machine); "
        f"{m['wall_seconds']:.0f} s wall, {m['cpu_seconds']:.0f} s CPU in total. Times are CPU "
        "seconds of the process.",
        "",
        f"Config: `config/config.yaml` ({agents}; {base['num_envs']} copies x "
        f"{base['rollouts']} steps per update, {base['learning_epochs']} epochs x "
        f"{base['mini_batches']} minibatches, learning rate {base['learning_rate']:g}, "
        f"max_risk {base['max_risk']:g}, shield {base['shield_version']}, world model "
        f"{base['wm_version']}; shield overrides: {overrides}). Shield: horizon "
        f"{shield['horizon']}, ensemble {shield['ensemble_size']} x "
        f"{tuple(shield['wm_hidden'])}, critic {tuple(shield['critic_hidden'])}.",
        "",
        "### Arithmetic of the filter",
        "",
        f"Models fitted on {s['passive']} passive rollout{'s' * (s['passive'] != 1)}, shield "
        "armed; the filter calls of the next rollout replayed (deterministic). FLOPs of every "
        "matmul the filter runs (from their shapes); the same matmuls timed alone on "
        f"preallocated inputs; fastest of {s['repeats']} alternating passes. Stage shares: "
        "decisions whose proposal failed (one-agent changes judged) and that went on to the "
        "search (no one-agent change passed).",
        "",
        *table(
            "env | joint actions | calls | one-agent / searched | matmuls | GFLOP | filter ms / "
            "call | filter GFLOP/s | matmul-only GFLOP/s | arithmetic fraction",
            "lrrrrrrrrr",
            (
                f"{f['env']} | {f['joint_actions']} | {f['filter_calls']} | "
                f"{f['one_change_share']:.0%} / {f['searched_share']:.0%} | "
                f"{f['matmul_calls']} | {f['gflop']:.3f} | {f['filter_ms_per_call']:.2f} | "
                f"{f['filter_gflops_per_s']:.2f} | {f['matmul_gflops_per_s']:.2f} | "
                f"**{f['arithmetic_fraction']:.2f}**"
                for f in r["filter"]
            ),
        ),
        "",
        "### Training",
        "",
        f"The first {t0['patience']} + {t0['armed_updates']} updates (watching + armed) of "
        f"a {t0['run_updates']}-update default run, `ippo` and `shield` one update each in "
        "turn; `ippo` twice (same seed, before and after each shield update), its mean the "
        "reference. Split of the shield's armed updates: collection (env and policy, without "
        "the filter), filter, model fitting (`after_update`), rest (advantages, PPO update).",
        "",
        "Floor: what no shield at these models can skip, as a multiple of ippo's armed "
        "updates: ippo's own work plus each step's proposals judged once (q of the proposed "
        "joint action of every copy, one batched model call per step, timed on the armed "
        "updates' recorded filter inputs; nothing searched, no model fitted); *with storage*: "
        "also the shield's collection time beyond ippo's (the transitions and decisions it "
        "keeps during the rollout; their one replay write per update counts in model "
        "fitting).",
        "",
        *table(
            "env | ippo s | shield s | ratio, all updates | ratio, armed updates | collection s "
            "(ippo's) | filter s (proposals judged once) | model fitting s | rest s | one-agent "
            "/ searched | floor | floor with storage",
            "lrrrrrrrrrrr",
            (
                f"{t['env']} | {t['ippo_seconds']:.1f} | {t['shield_seconds']:.1f} | "
                f"{t['ratio_all']:.2f} | **{t['ratio_armed']:.2f}** | "
                f"{t['armed_collect_seconds']:.1f} ({t['ippo_armed_collect_seconds']:.1f}) | "
                f"{t['armed_filter_seconds']:.1f} ({t['armed_proposal_seconds']:.1f}) | "
                f"{t['armed_model_seconds']:.1f} | {t['armed_rest_seconds']:.1f} | "
                f"{t['one_change_share']:.0%} / {t['searched_share']:.0%} | "
                f"{t['floor_judged']:.2f} | {t['floor_stored']:.2f}"
                for t in r["training"]
            ),
        ),
        "",
        "### Evaluation",
        "",
        f"The trained shield policy above over {e0['episodes']} evaluation episodes of at most "
        f"{e0['max_steps']} steps ({e0['batch_size']} copies per batch, the evaluation's "
        f"seeds), shield on and off; fastest of {s['eval_repeats']} passes of each. Floor: "
        "shield off plus each step's proposals judged once (the same filter calls, recorded "
        "in a further untimed pass). Violating: the share of the episodes with a violation "
        f"within the constraint's {e0['horizon']} steps, of this policy at its training "
        "allowance (not the deployed one, which its certificate chooses after the last update; "
        'section "Shield cost against its models" evaluates that one).',
        "",
        *table(
            "env | mean length off / on | violating off / on | off s | on s | ratio on / off | "
            "overridden / one-agent / searched | proposals judged once s | floor",
            "lrrrrrrrr",
            (
                f"{e['env']} | {e['mean_length_off']:.0f} / {e['mean_length_on']:.0f} | "
                f"{e['violating_off']:.3f} / {e['violating_on']:.3f} | "
                f"{e['off_seconds']:.2f} | {e['on_seconds']:.2f} | **{e['ratio']:.2f}** | "
                f"{e['overridden_share']:.0%} / {e['one_change_share']:.0%} / "
                f"{e['searched_share']:.0%} | {e['proposal_seconds']:.2f} | {e['floor']:.2f}"
                for e in r["evaluation"]
            ),
        ),
    ]
    if r.get("decentralised"):
        d0 = r["decentralised"][0]
        lines += [
            "",
            "### The decentralised shield (`shield_dec`)",
            "",
            f"The same measurements for `shield_dec` of the default experiment: its first "
            f"{d0['patience']} + {d0['armed_updates']} updates against `ippo` (one update of "
            "each in turn, `ippo` twice), and its trained policy's evaluation with the shield "
            "on and off (as above). Overridden: decisions in which some agent's proposal was "
            "replaced.",
            "",
            *table(
                "env | ippo s, armed | shield_dec s, armed | ratio, armed updates | filter s | "
                "model fitting s | eval off s | eval on s | ratio on / off | overridden",
                "lrrrrrrrrr",
                (
                    f"{d['env']} | {d['ippo_armed_seconds']:.1f} | "
                    f"{d['shield_armed_seconds']:.1f} | **{d['ratio_armed']:.2f}** | "
                    f"{d['armed_filter_seconds']:.1f} | {d['armed_model_seconds']:.1f} | "
                    f"{d['evaluation']['off_seconds']:.2f} | {d['evaluation']['on_seconds']:.2f}"
                    f" | **{d['evaluation']['ratio']:.2f}** | "
                    f"{d['evaluation']['overridden_share']:.0%}"
                    for d in r["decentralised"]
                ),
            ),
        ]
    return "\n".join([*lines, "", "Targets:", "", *targets(r)])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, save JSON, update BENCHMARKS.md."""
    parser = arguments(__doc__, quick=True)
    parser.add_argument("--armed-updates", type=positive_int, help="training updates after arming")
    parser.add_argument("--repeats", type=positive_int, help="timed passes of the filter replays")
    args = parser.parse_args(list(argv) if argv is not None else [])
    sizes = QUICK if args.quick else FULL
    given = {"armed_updates": args.armed_updates, "repeats": args.repeats}
    sizes = replace(sizes, **{k: v for k, v in given.items() if v is not None})
    configure_logging(min_level=WARNING, file_enabled=False)  # no line per training update
    command = "python -m benchmarks.shield" + (" --quick" if args.quick else "")
    results = benchmark(sizes)
    save_results("shield", results, render_markdown(results, command=command), quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
