"""The shield's cost at the default configuration, on `hazard_grid` and `intersection`.

Every run config is built from `config/config.yaml` (its `base`, the env's `env_params` and
`algo_params.shield`), so the benchmark follows the default experiment. Torch runs on one
thread; times are CPU seconds of this process (`time.process_time`), which on a shared
machine count only this process's work. Measured, per env:

- the arithmetic share of the filter: the shield's models fitted on `passive` rollouts
  collected while it only watches, then armed; the inputs of the filter calls of one rollout
  are recorded and replayed. Every matmul the filter runs (`mm`, `addmm`, `bmm`, `baddbmm`,
  `matmul`, `linear` seen at torch's dispatcher, and the products `src.numerics` sends to
  OpenBLAS) is recorded with its shapes, its FLOPs
  counted from them (2 per multiply-add), and the same sequence of matmuls is timed alone on
  preallocated inputs and outputs. The fraction matmul-only time / filter time is the share of
  the filter's time that is arithmetic; FLOPs / filter time its achieved rate. Replays of the
  filter and of the matmuls alternate and the fastest of `repeats` passes of each is kept;
- training: `ippo` and `shield` trained side by side for the first updates of a default run
  (`shield_patience` watching updates, then the armed ones), one update of each in turn; the
  `ippo` run is done twice (before and after the shield's update, the same seed, identical
  work) and its mean is the reference. The shield's time is split into rollout collection
  (without the filter), the filter, model fitting (`after_update`: world model, safety
  critic, calibration) and the rest (advantages, PPO update, logging);
- evaluation: the trained shield policy over the evaluation's episodes (seeds, batch size
  and episode length of the config's `final_policy_eval_*`), with the shield and without it
  (the CPU time of each, and the share of episodes with a violation within the constraint's
  horizon and the mean return, which say what the time bought);
- the decentralised shield (`shield_dec`, when the experiment runs it): its training against
  `ippo` over the same updates and its trained policy's evaluation, as above (no stage split
  and no floor: those describe the central filter).

The filter (`src.algos.shield.budget`) judges the proposals of all copies in one call, the
one-agent changes of the failed ones, and searches (`search`) only for the copies still
undecided: how many copies reach each stage is reported with the times.

Run: `python -m benchmarks.shield` (or `make bench`); `--quick` for a smoke run (fewer updates
and episodes, nothing written to BENCHMARKS.md). Results go to `benchmarks/out/shield.json`
and the section between the shield markers of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import machine_info, positive_int, save_results
from src import numerics
from src.algos import metrics as M
from src.algos.ippo import IPPO
from src.algos.networks import ActorCritic
from src.algos.policy import Actor
from src.algos.shield.assemble import load_shield
from src.algos.shield.budget import BudgetShield
from src.algos.shield.trainer import ShieldedIPPO
from src.algos.train import build_trainer, make_vector_env_for
from src.config.run import RunConfig, make_run_config
from src.core.logging import WARNING, configure_logging
from src.envs.registry import make_vector_env
from src.evaluation.episodes import horizon_summary
from src.evaluation.evaluate import collect_episodes
from src.seeds import copy_seeds

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
CONFIG = ROOT / "config" / "config.yaml"
ENVS = ("hazard_grid", "intersection")
TRAIN_TARGET = 2.0  # shield training CPU time at most this multiple of ippo's
EVAL_TARGET = 5.0  # shield-on evaluation CPU time at most this multiple of shield-off
DEC_TRAIN_TARGET = 5.0  # the same for shield_dec (its agents judge the others' predicted actions)
DEC_EVAL_TARGET = 10.0
MATMULS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear")


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run (None: the default experiment's own value)."""

    passive: int = 2
    """Rollouts the shield watches (and fits its models on) before the filter is measured."""
    filter_calls: int | None = None
    """Filter calls replayed (None: every call of one rollout)."""
    repeats: int = 5
    """Timed passes of the filter replay and of the matmul replay (the fastest is kept)."""
    patience: int | None = None
    """Watching updates before the shield arms in the training measurement."""
    armed_updates: int = 24
    """Training updates measured after the shield armed."""
    eval_episodes: int | None = None
    """Evaluation episodes (None: `final_policy_eval_episodes`)."""
    eval_steps: int | None = None
    """Steps per evaluation episode at most (None: the largest evaluation horizon)."""
    eval_repeats: int = 2
    """Timed passes of each evaluation mode (the fastest is kept)."""
    num_envs: int | None = None
    """Env copies in training (None: the config's `num_envs`)."""
    rollouts: int | None = None
    """Steps per copy and update (None: the config's `rollouts`)."""


FULL = Sizes()
QUICK = Sizes(
    filter_calls=8, repeats=2, patience=1, armed_updates=2, eval_episodes=20, eval_repeats=1
)


# ------------------------------------------------------------------ configs and trainers


def default_experiment(path: Path = CONFIG) -> dict[str, Any]:
    """The workflow config of the default experiment."""
    return yaml.safe_load(path.read_text())


def run_config(
    experiment: Mapping[str, Any],
    env_name: str,
    algo: str,
    *,
    patience: int | None = None,
    num_envs: int | None = None,
    rollouts: int | None = None,
) -> dict[str, Any]:
    """Run 0's config of (`env_name`, `algo`) in `experiment`, with optional overrides."""
    base = {k: v for k, v in experiment["base"].items() if k != "use_wandb"}
    if patience is not None:
        base["shield_patience"] = patience
    if num_envs is not None:
        base["num_envs"] = num_envs
    if rollouts is not None:
        base["rollouts"] = rollouts
    env_params = dict(experiment["env_params"][env_name])
    n_agents = env_params.pop("n_agents")
    return make_run_config(
        env_name=env_name,
        algo=algo,
        n_agents=n_agents,
        env_params=env_params,
        algo_params=dict(experiment.get("algo_params", {}).get(algo, {})),
        threads=experiment.get("threads", 1),
        **base,
    )


def make_trainer(config: Mapping[str, Any]) -> IPPO:
    """The run's trainer on its env, the env reset as `train()` would on its first call."""
    trainer = build_trainer(config, make_vector_env_for(RunConfig.from_dict(config)))
    trainer._obs = trainer.env.reset(seed=copy_seeds(trainer.seed, trainer.num_envs))
    return trainer


class _Pause(Exception):
    """Raised after one update to return from `IPPO.train`."""


class _PauseAfterUpdate:
    """A training callback that stops `train()` after each update (a later call resumes)."""

    def on_epoch_end(self, trainer: IPPO, epoch: int) -> None:
        """Nothing at the end of an epoch."""

    def on_update_end(self, trainer: IPPO) -> None:
        """Stop here: the update is complete and counted."""
        raise _Pause


def train_one_update(trainer: IPPO) -> float:
    """Run the trainer's next update through `train()`; its CPU seconds."""
    started = time.process_time()
    with suppress(_Pause):
        trainer.train(callbacks=[_PauseAfterUpdate()], progress=False)
    return time.process_time() - started


# ------------------------------------------------------------------ instrumentation


def patch(owner: Any, name: str, new: Any) -> Callable[[], None]:
    """Set `owner.name = new`; returns the undo (what the instance held before, if anything)."""
    missing = object()
    before = vars(owner).get(name, missing)
    setattr(owner, name, new)

    def undo() -> None:
        if before is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, before)

    return undo


class CpuSplit:
    """CPU seconds spent in chosen methods of chosen objects (wrapped until `restore`)."""

    def __init__(self) -> None:
        """No method wrapped yet."""
        self.seconds: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, method: str, key: str) -> None:
        """Add the CPU time of every call of `owner.method` to `seconds[key]`."""
        original = getattr(owner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key] += time.process_time() - started

        self._undo.append(patch(owner, method, timed))

    def snapshot(self) -> dict[str, float]:
        """The totals so far."""
        return dict(self.seconds)

    def restore(self) -> None:
        """Unwrap every method."""
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


@dataclass
class Stages:
    """How far the filter went, counted over its calls (copies are (copy, step) decisions)."""

    calls: int = 0
    """Filter calls."""
    decisions: int = 0
    """(copy, step) decisions, one per env copy and call."""
    one_change: int = 0
    """Decisions whose proposal failed, so that the one-agent changes were judged."""
    searched: int = 0
    """Decisions that went on to the search (no one-agent change passed): the descent of
    `search: coordinate`, every joint action with `search: exhaustive`."""
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

    undo = [
        patch(shield, "filter", counted_filter),
        patch(shield, "_one_change", counted_one_change),
    ]
    try:
        yield stages
    finally:
        for step in reversed(undo):
            step()


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


NUMERICS_MATMULS = ("baddbmm", "bmm", "linear")
"""The products of `src.numerics` (their arguments in torch's order)."""


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
            self._undo.append(patch(numerics, name, self._recording(name, getattr(numerics, name))))
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

    def _recording(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self._record(name, args, "numerics")
            return function(*args, **kwargs)

        return recorded

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Record a matmul's argument shapes, then run the op."""
        name = func.overloadpacket.__name__
        if name in MATMULS:
            self._record(name, args, "torch")
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
    generator = torch.Generator().manual_seed(seed)
    plans: list[tuple[Callable[..., Any], list[tuple[Any, ...]], tuple[Any, ...]]] = []
    spans: dict[tuple[Any, ...], int] = defaultdict(int)
    for call in calls:
        shapes, strides = list(call.shapes), list(call.strides)
        op = call.op
        if call.library == "numerics":
            # The same product on OpenBLAS: numerics' function with `out=` where it takes one.
            if op == "linear":
                out_shape = (*shapes[0][:-1], shapes[1][0])
            else:
                meta = [
                    torch.empty_strided(sh, st, device="meta")
                    for sh, st in zip(shapes, strides, strict=True)
                ]
                out_shape = tuple(getattr(torch, op)(*meta).shape)
            function = getattr(numerics, op)
            op = f"numerics.{op}"
        elif op == "linear":  # addmm(bias, x as 2-d, weight.t())
            x, w = shapes[0], shapes[1]
            bias = (shapes[2], strides[2]) if len(shapes) > 2 else ((w[0],), (1,))
            rows = math.prod(x[:-1])
            shapes = [bias[0], (rows, x[-1]), (w[1], w[0])]
            strides = [bias[1], (x[-1], 1), (strides[1][1], strides[1][0])]
            op = "addmm"
        pairs = list(zip(shapes, strides, strict=True))
        if not op.startswith("numerics."):
            meta = [torch.empty_strided(sh, st, device="meta") for sh, st in pairs]
            out_shape = tuple(getattr(torch, op)(*meta).shape)
            function = getattr(torch, op)
        args = []
        for position, (sh, st) in enumerate(pairs):
            key = (op, position, len(sh), sh[-1] if sh else 0)
            spans[key] = max(spans[key], _span(sh, st))
            args.append((key, sh, st))
        out_strides = _contiguous_strides(out_shape)
        key = (op, "out", len(out_shape), out_shape[-1] if out_shape else 0)
        spans[key] = max(spans[key], _span(out_shape, out_strides))
        plans.append((function, args, (key, out_shape, out_strides)))
    buffers = {key: torch.randn(max(span, 1), generator=generator) for key, span in spans.items()}
    steps: list[Callable[[], Any]] = []
    for function, args, (key, shape, stride) in plans:
        tensors = tuple(buffers[k].as_strided(sh, st) for k, sh, st in args)
        if function is numerics.bmm:  # no `out`: it returns OpenBLAS's own array
            steps.append(lambda f=function, a=tensors: f(*a))
            continue
        out = buffers[key].as_strided(shape, stride)
        steps.append(lambda f=function, a=tensors, o=out: f(*a, out=o))

    def run() -> None:
        for step in steps:
            step()

    return run


def record_filter_inputs(shield: BudgetShield) -> tuple[list[tuple[Any, ...]], Callable[[], None]]:
    """Keep a copy of the inputs of every later filter call; returns them and an undo."""
    inputs: list[tuple[Any, ...]] = []
    original = shield.filter

    def recorded(obs: Any, proposed: Any, logits: torch.Tensor, step: Any) -> Any:
        inputs.append((obs.copy(), proposed.copy(), logits.clone(), step.copy()))
        return original(obs, proposed, logits, step)

    return inputs, patch(shield, "filter", recorded)


def replay_filter(shield: BudgetShield, inputs: Sequence[tuple[Any, ...]]) -> float:
    """Run the recorded filter calls again (the filter samples nothing); their CPU seconds."""
    shield.reset(len(inputs[0][1]), seed=0)
    started = time.process_time()
    for obs, proposed, logits, step in inputs:
        shield.filter(obs, proposed, logits, step)
    return time.process_time() - started


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


def filter_arithmetic(experiment: Mapping[str, Any], env_name: str, sizes: Sizes) -> dict[str, Any]:
    """FLOPs and arithmetic share of the filter, models fitted on `sizes.passive` rollouts."""
    config = run_config(
        experiment,
        env_name,
        "shield",
        patience=sizes.passive,
        num_envs=sizes.num_envs,
        rollouts=sizes.rollouts,
    )
    trainer = make_trainer(config)
    if not isinstance(trainer, ShieldedIPPO) or not isinstance(trainer.shield, BudgetShield):
        raise RuntimeError(f"{env_name}: the default shield is not the shield")
    for update in range(sizes.passive):
        trainer.collect_rollout()
        trainer.after_update(update)
    if not trainer.armed:
        raise RuntimeError(f"{env_name}: the shield did not arm after {sizes.passive} updates")
    shield = trainer.shield
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
    filter_seconds, matmul_seconds = [], []
    for _ in range(sizes.repeats):
        filter_seconds.append(replay_filter(shield, inputs))
        started = time.process_time()
        matmuls()
        matmul_seconds.append(time.process_time() - started)
    flops = sum(call.flops for call in recorder.calls)
    best_filter, best_matmul = min(filter_seconds), min(matmul_seconds)
    ops: dict[str, int] = defaultdict(int)
    for call in recorder.calls:
        ops[call.op] += 1
    return {
        "env": env_name,
        "n_agents": trainer.env.n_agents,
        "num_envs": trainer.num_envs,
        "joint_actions": int(shield.joint.shape[0]),
        "passive_rollouts": sizes.passive,
        "filter_calls": len(inputs),
        "decisions": stages.decisions,
        **stages.shares(),
        "matmul_calls": len(recorder.calls),
        "matmul_ops": dict(ops),
        "gflop": flops / 1e9,
        "filter_seconds": best_filter,
        "filter_ms_per_call": 1e3 * best_filter / len(inputs),
        "filter_gflops_per_s": flops / best_filter / 1e9,
        "matmul_seconds": best_matmul,
        "matmul_gflops_per_s": flops / best_matmul / 1e9,
        "arithmetic_fraction": best_matmul / best_filter,
    }


# ------------------------------------------------------------------ training and evaluation


def alternate(
    ippo: Sequence[IPPO],
    shielded: IPPO,
    updates: int,
    split: CpuSplit,
    before_update: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """`updates` updates of `ippo[0]`, `shielded` and `ippo[1]`, one of each in turn: their CPU
    seconds per update ([2, U] and [U]) and `split`'s totals after each update."""
    ippo_seconds = np.zeros((2, updates))
    shield_seconds = np.zeros(updates)
    parts = []
    for update in range(updates):
        if before_update is not None:
            before_update(update)
        ippo_seconds[0, update] = train_one_update(ippo[0])
        shield_seconds[update] = train_one_update(shielded)
        ippo_seconds[1, update] = train_one_update(ippo[1])
        parts.append(split.snapshot())
    return ippo_seconds, shield_seconds, parts


def side_by_side(
    experiment: Mapping[str, Any], env_name: str, algo: str, sizes: Sizes, coordination: str
) -> tuple[list[IPPO], ShieldedIPPO, int, int]:
    """Two `ippo` trainers and one of the shield `algo` (its `coordination`) on `env_name`,
    at `sizes`: (ippo runs, shield run, its watching updates, the updates to measure)."""
    overrides = {"patience": sizes.patience, "num_envs": sizes.num_envs, "rollouts": sizes.rollouts}
    ippo = [make_trainer(run_config(experiment, env_name, "ippo", **overrides)) for _ in range(2)]
    shielded = make_trainer(run_config(experiment, env_name, algo, **overrides))
    if (
        not isinstance(shielded, ShieldedIPPO)
        or not isinstance(shielded.shield, BudgetShield)
        or shielded.shield.config.coordination != coordination
    ):
        raise RuntimeError(f"{env_name}: {algo} is not the {coordination} shield")
    patience = shielded.shield_cfg.shield_patience
    updates = patience + sizes.armed_updates
    if updates > shielded.num_updates:
        raise ValueError(f"{updates} updates asked, the run has {shielded.num_updates}")
    return ippo, shielded, patience, updates


def training_cost(
    experiment: Mapping[str, Any], env_name: str, sizes: Sizes
) -> tuple[dict[str, Any], ShieldedIPPO]:
    """CPU seconds of `shield` vs `ippo` over the same updates, one update of each in turn."""
    ippo, shielded, patience, updates = side_by_side(
        experiment, env_name, "shield", sizes, "central"
    )
    split = CpuSplit()
    split.wrap(shielded, "collect_rollout", "collect")
    split.wrap(shielded, "after_update", "models")
    split.wrap(shielded.shield, "filter", "filter")
    for run in ippo:
        split.wrap(run, "collect_rollout", "ippo_collect")
    armed_inputs: list[tuple[Any, ...]] = []
    stop_recording: Callable[[], None] | None = None

    def record_when_armed(update: int) -> None:
        nonlocal armed_inputs, stop_recording
        if update == patience:  # the armed updates' filter inputs, for the floor
            armed_inputs, stop_recording = record_filter_inputs(shielded.shield)

    try:
        with count_stages(shielded.shield) as stages:
            try:
                ippo_seconds, shield_seconds, parts = alternate(
                    ippo, shielded, updates, split, record_when_armed
                )
            finally:
                if stop_recording is not None:
                    stop_recording()
    finally:
        split.restore()
    reference = ippo_seconds.mean(axis=0)
    armed = slice(patience, updates)
    before = parts[patience - 1] if patience > 0 else {}
    after = parts[-1]
    keys = ("collect", "filter", "models", "ippo_collect")
    spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in keys}
    armed_shield = float(shield_seconds[armed].sum())
    ippo_armed = float(reference[armed].sum())
    # The floor: ippo's update plus what no shield at these models can skip.
    judged = proposal_seconds(shielded.shield, armed_inputs)
    stored = max(0.0, spent["collect"] - spent["filter"] - spent["ippo_collect"] / 2)
    rows = shielded.updates[armed]
    steps = sizes.armed_updates * shielded.steps_per_update
    result = {
        "env": env_name,
        "n_agents": shielded.env.n_agents,
        "num_envs": shielded.num_envs,
        "rollouts": shielded.rollouts,
        "steps_per_update": shielded.steps_per_update,
        "patience": patience,
        "armed_updates": sizes.armed_updates,
        "run_updates": shielded.num_updates,
        "ippo_seconds": float(reference.sum()),
        "ippo_seconds_runs": [float(s) for s in ippo_seconds.sum(axis=1)],
        "shield_seconds": float(shield_seconds.sum()),
        "ratio_all": float(shield_seconds.sum() / reference.sum()),
        "ippo_armed_seconds": ippo_armed,
        "shield_armed_seconds": armed_shield,
        "ratio_armed": armed_shield / ippo_armed,
        "ippo_armed_collect_seconds": spent["ippo_collect"] / 2,
        "armed_proposal_seconds": judged,
        "armed_storage_seconds": stored,
        "floor_judged": (ippo_armed + judged) / ippo_armed,
        "floor_stored": (ippo_armed + judged + stored) / ippo_armed,
        "armed_collect_seconds": spent["collect"] - spent["filter"],
        "armed_filter_seconds": spent["filter"],
        "armed_model_seconds": spent["models"],
        "armed_rest_seconds": armed_shield - spent["collect"] - spent["models"],
        "unarmed_model_seconds_per_update": (before.get("models", 0.0) / max(patience, 1)),
        "logged_filter_seconds": float(sum(r[M.SHIELD_SECONDS] for r in rows)),
        "logged_model_seconds": float(sum(r[M.SHIELD_MODEL_SECONDS] for r in rows)),
        "armed_steps": steps,
        "shield_steps_per_cpu_s": steps / armed_shield,
        "ippo_steps_per_cpu_s": steps / float(reference[armed].sum()),
        **stages.shares(),
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
    batch = min(settings.final_policy_eval_num_envs, episodes)
    params = config.env.constructor_params(max_steps=steps)
    seeds = [settings.first_seed(config.run_idx) + i for i in range(episodes)]
    net = ActorCritic.from_policy_state(state)
    shield = load_shield(state, config, net=net)
    actors = {
        "off": Actor(net=net, config=config),
        "on": Actor(net=net, config=config, action_filter=shield),
    }
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    lengths: dict[str, float] = {}
    # P(violation within the constraint's horizon), its interval's upper end, the mean return
    # within it: the evaluation's own summary of each mode's episodes.
    risk: dict[str, dict[str, float]] = {}
    horizon = min(config.constraint_horizon or steps, steps)

    def run(mode: str) -> float:
        started = time.process_time()
        batch_run = collect_episodes(
            make_vec=lambda copies: make_vector_env(
                config.env_name, num_envs=copies, seed=None, **params
            ),
            actor=actors[mode],
            seeds=seeds,
            max_steps=steps,
            batch_size=batch,
            actor_seed=settings.first_seed(config.run_idx),
        )
        seconds = time.process_time() - started  # the episodes only, not their summary
        lengths[mode] = float(batch_run.length.mean())
        summary = horizon_summary(
            batch_run, [horizon], confidence=settings.final_policy_eval_confidence
        ).iloc[0]
        risk[mode] = {
            "violating": float(summary["p_violation"]),
            "violating_high": float(summary["ci_high"]),
            "return": float(summary["mean_return"]),
        }
        return seconds

    if not isinstance(shield, BudgetShield):
        raise RuntimeError(f"{config.env_name}: the trained shield is not the shield")
    # Every pass of a mode runs the same episodes with the same actions: the counts of the
    # passes are equal, and counting costs microseconds per call.
    with count_stages(shield) as stages:
        for _ in range(sizes.eval_repeats):
            for mode in ("off", "on"):
                seconds[mode].append(run(mode))
    off, on = min(seconds["off"]), min(seconds["on"])
    result = {
        "env": config.env_name,
        "episodes": episodes,
        "max_steps": steps,
        "batch_size": batch,
        "mean_length_off": lengths["off"],
        "mean_length_on": lengths["on"],
        "horizon": horizon,
        "confidence": settings.final_policy_eval_confidence,
        **{f"{key}_{mode}": value for mode in ("off", "on") for key, value in risk[mode].items()},
        "off_seconds": off,
        "on_seconds": on,
        "ratio": on / off,
        **stages.shares(),
    }
    if floor:
        inputs, undo = record_filter_inputs(shield)  # an untimed pass: the floor's filter calls
        try:
            run("on")
        finally:
            undo()
        judged = proposal_seconds(shield, inputs)
        result.update(proposal_seconds=judged, floor=(off + judged) / off)
    return result


def decentralised_cost(
    experiment: Mapping[str, Any], env_name: str, sizes: Sizes
) -> dict[str, Any]:
    """`shield_dec` against `ippo` over the same updates (as `training_cost`), and its trained
    policy's evaluation with the shield on and off."""
    ippo, shielded, patience, updates = side_by_side(
        experiment, env_name, "shield_dec", sizes, "decentralised"
    )
    split = CpuSplit()
    split.wrap(shielded, "after_update", "models")
    split.wrap(shielded.shield, "filter", "filter")
    try:
        ippo_seconds, shield_seconds, parts = alternate(ippo, shielded, updates, split)
    finally:
        split.restore()
    armed = slice(patience, updates)
    before = parts[patience - 1] if patience > 0 else {}
    spent = {k: parts[-1].get(k, 0.0) - before.get(k, 0.0) for k in ("filter", "models")}
    ippo_armed = float(ippo_seconds.mean(axis=0)[armed].sum())
    shield_armed = float(shield_seconds[armed].sum())
    return {
        "env": env_name,
        "n_agents": shielded.env.n_agents,
        "patience": patience,
        "armed_updates": sizes.armed_updates,
        "ippo_armed_seconds": ippo_armed,
        "shield_armed_seconds": shield_armed,
        "ratio_armed": shield_armed / ippo_armed,
        "armed_filter_seconds": spent["filter"],
        "armed_model_seconds": spent["models"],
        "evaluation": evaluation_cost(shielded, sizes, floor=False),
    }


# ------------------------------------------------------------------ the whole benchmark


def shield_settings(experiment: Mapping[str, Any], env_name: str) -> dict[str, Any]:
    """The resolved shield config of the default experiment on `env_name`."""
    config = RunConfig.from_dict(run_config(experiment, env_name, "shield"))
    return config.shield.to_dict()


def benchmark(
    sizes: Sizes = FULL,
    *,
    experiment: Mapping[str, Any] | None = None,
    envs: Sequence[str] = ENVS,
) -> dict[str, Any]:
    """Every measurement of this module, per env."""
    experiment = experiment if experiment is not None else default_experiment()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    wall, cpu = time.perf_counter(), time.process_time()
    result: dict[str, Any] = {
        "sizes": asdict(sizes),
        "config": {
            "base": {k: v for k, v in experiment["base"].items() if k != "use_wandb"},
            "env_params": {env: dict(experiment["env_params"][env]) for env in envs},
            "algo_params": dict(experiment.get("algo_params", {}).get("shield", {})),
            "shield": shield_settings(experiment, envs[0]),
        },
        "filter": [],
        "training": [],
        "evaluation": [],
        "decentralised": [],
    }
    for env_name in envs:
        result["filter"].append(filter_arithmetic(experiment, env_name, sizes))
        training, trainer = training_cost(experiment, env_name, sizes)
        result["training"].append(training)
        result["evaluation"].append(evaluation_cost(trainer, sizes))
        if "shield_dec" in experiment["algos"]:
            result["decentralised"].append(decentralised_cost(experiment, env_name, sizes))
    result["machine"] = {
        **machine_info(load_before),
        "wall_seconds": time.perf_counter() - wall,
        "cpu_seconds": time.process_time() - cpu,
    }
    return result


def targets(r: Mapping[str, Any]) -> list[str]:
    """One line per target and env: the measured ratio and whether the target is met."""
    lines = []
    for t in r["training"]:
        met = "met" if t["ratio_armed"] <= TRAIN_TARGET else "NOT met"
        lines.append(
            f"- {t['env']}: shield training <= {TRAIN_TARGET:g}x ippo (armed updates): "
            f"{t['ratio_armed']:.2f}x, {met}; floor {t['floor_judged']:.2f}x "
            f"({t['floor_stored']:.2f}x with the transitions stored), leaving "
            f"{TRAIN_TARGET - t['floor_stored']:.2f}x of ippo's update for the search and "
            "the model fits."
        )
    for e in r["evaluation"]:
        met = "met" if e["ratio"] <= EVAL_TARGET else "NOT met"
        lines.append(
            f"- {e['env']}: shield-on evaluation <= {EVAL_TARGET:g}x shield-off: "
            f"{e['ratio']:.2f}x, {met}; floor {e['floor']:.2f}x."
        )
    for d in r.get("decentralised", []):
        train_met = "met" if d["ratio_armed"] <= DEC_TRAIN_TARGET else "NOT met"
        e = d["evaluation"]
        eval_met = "met" if e["ratio"] <= DEC_EVAL_TARGET else "NOT met"
        lines.append(
            f"- {d['env']}: shield_dec training <= {DEC_TRAIN_TARGET:g}x ippo (armed updates): "
            f"{d['ratio_armed']:.2f}x, {train_met}; shield-on evaluation <= {DEC_EVAL_TARGET:g}x "
            f"shield-off: {e['ratio']:.2f}x, {eval_met}."
        )
    return lines


def render_markdown(r: Mapping[str, Any], *, command: str = "python -m benchmarks.shield") -> str:
    """The BENCHMARKS.md section."""
    m, c, s = r["machine"], r["config"], r["sizes"]
    base, shield = c["base"], c["shield"]
    overrides = ", ".join(f"{k} {v}" for k, v in c["algo_params"].items()) or "none"
    agents = ", ".join(f"{env} {p['n_agents']} agents" for env, p in c["env_params"].items())
    lines = [
        "## Shield",
        "",
        f"`{command}`{'' if '--quick' in command else ' (part of `make bench`)'} on "
        f"{m['date']}: {m['platform']}, "
        f"{m['cpus']} CPUs ({m['processor']}), Python {m['python']}, torch {m['torch']} on "
        f"{m['torch_threads']} thread; load average {m['load_before'][0]:.2f} before, "
        f"{m['load_after'][0]:.2f} after (shared machine); {m['wall_seconds']:.0f} s wall, "
        f"{m['cpu_seconds']:.0f} s CPU in total. Times are CPU seconds of the process.",
        "",
        f"Config: `config/config.yaml` ({agents}; {base['num_envs']} copies x "
        f"{base['rollouts']} steps per update, {base['learning_epochs']} epochs x "
        f"{base['mini_batches']} minibatches, learning rate {base['learning_rate']:g}, "
        f"max_risk {base['max_risk']:g}, shield {base['shield_version']}, world model "
        f"{base['wm_version']}; shield overrides: {overrides}). Shield: risk_scope "
        f"{shield['risk_scope']}, horizon {shield['horizon']}, lookahead {shield['lookahead']}, "
        f"ensemble {shield['ensemble_size']} x {tuple(shield['wm_hidden'])}, critic "
        f"{tuple(shield['critic_hidden'])}.",
        "",
        "### Arithmetic of the filter",
        "",
        f"Models fitted on {s['passive']} passive rollout{'s' * (s['passive'] != 1)}, shield "
        "armed; the filter calls of "
        "the next rollout replayed (deterministic). FLOPs of every matmul the filter runs "
        "(from their shapes); the same matmuls timed alone on preallocated inputs; fastest of "
        f"{s['repeats']} alternating passes. Stage shares: decisions whose proposal failed "
        "(one-agent changes judged) and that went on to the search (no one-agent change passed).",
        "",
        "| env | joint actions | calls | one-agent / searched | matmuls | GFLOP | "
        "filter ms / call | filter GFLOP/s | matmul-only GFLOP/s | arithmetic fraction |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in r["filter"]:
        lines.append(
            f"| {f['env']} | {f['joint_actions']} | {f['filter_calls']} | "
            f"{f['one_change_share']:.0%} / {f['searched_share']:.0%} | {f['matmul_calls']} | "
            f"{f['gflop']:.3f} | {f['filter_ms_per_call']:.2f} | "
            f"{f['filter_gflops_per_s']:.2f} | {f['matmul_gflops_per_s']:.2f} | "
            f"**{f['arithmetic_fraction']:.2f}** |"
        )
    t0 = r["training"][0]
    lines += [
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
        "| env | ippo s | shield s | ratio, all updates | ratio, armed updates | "
        "collection s (ippo's) | filter s (proposals judged once) | model fitting s | rest s | "
        "one-agent / searched | floor | floor with storage |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in r["training"]:
        lines.append(
            f"| {t['env']} | {t['ippo_seconds']:.1f} | {t['shield_seconds']:.1f} | "
            f"{t['ratio_all']:.2f} | **{t['ratio_armed']:.2f}** | "
            f"{t['armed_collect_seconds']:.1f} ({t['ippo_armed_collect_seconds']:.1f}) | "
            f"{t['armed_filter_seconds']:.1f} ({t['armed_proposal_seconds']:.1f}) | "
            f"{t['armed_model_seconds']:.1f} | {t['armed_rest_seconds']:.1f} | "
            f"{t['one_change_share']:.0%} / {t['searched_share']:.0%} | "
            f"{t['floor_judged']:.2f} | {t['floor_stored']:.2f} |"
        )
    e0 = r["evaluation"][0]
    lines += [
        "",
        "### Evaluation",
        "",
        f"The trained shield policy above over {e0['episodes']} evaluation episodes of at most "
        f"{e0['max_steps']} steps ({e0['batch_size']} copies per batch, the evaluation's "
        f"seeds), shield on and off; fastest of {s['eval_repeats']} passes of each. Floor: "
        "shield off plus each step's proposals judged once (the same filter calls, recorded "
        f"in a further untimed pass). Violating: the share of the episodes with a violation "
        f"within the constraint's {e0['horizon']} steps, of this policy at its training "
        "allowance (not the deployed one, which its certificate chooses after the last update; "
        'section "Shield cost against its models" evaluates that one).',
        "",
        "| env | mean length off / on | violating off / on | off s | on s | ratio on / off | "
        "overridden / one-agent / searched | proposals judged once s | floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in r["evaluation"]:
        lines.append(
            f"| {e['env']} | {e['mean_length_off']:.0f} / {e['mean_length_on']:.0f} | "
            f"{e['violating_off']:.3f} / {e['violating_on']:.3f} | "
            f"{e['off_seconds']:.2f} | {e['on_seconds']:.2f} | **{e['ratio']:.2f}** | "
            f"{e['overridden_share']:.0%} / {e['one_change_share']:.0%} / "
            f"{e['searched_share']:.0%} | {e['proposal_seconds']:.2f} | {e['floor']:.2f} |"
        )
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
            "| env | ippo s, armed | shield_dec s, armed | ratio, armed updates | filter s | "
            "model fitting s | eval off s | eval on s | ratio on / off | overridden |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for d in r["decentralised"]:
            e = d["evaluation"]
            lines.append(
                f"| {d['env']} | {d['ippo_armed_seconds']:.1f} | {d['shield_armed_seconds']:.1f} | "
                f"**{d['ratio_armed']:.2f}** | {d['armed_filter_seconds']:.1f} | "
                f"{d['armed_model_seconds']:.1f} | {e['off_seconds']:.2f} | "
                f"{e['on_seconds']:.2f} | **{e['ratio']:.2f}** | {e['overridden_share']:.0%} |"
            )
    lines += ["", "Targets:", "", *targets(r)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, save JSON, update BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny budget, no markdown update")
    parser.add_argument("--armed-updates", type=positive_int, help="training updates after arming")
    parser.add_argument("--repeats", type=positive_int, help="timed passes of the filter replays")
    args = parser.parse_args(list(argv) if argv is not None else [])
    sizes = QUICK if args.quick else FULL
    if args.armed_updates is not None:
        sizes = replace(sizes, armed_updates=args.armed_updates)
    if args.repeats is not None:
        sizes = replace(sizes, repeats=args.repeats)
    configure_logging(min_level=WARNING, file_enabled=False)  # no line per training update
    results = benchmark(sizes)
    command = "python -m benchmarks.shield" + (" --quick" if args.quick else "")
    markdown = render_markdown(results, command=command)
    save_results("shield", results, markdown, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
