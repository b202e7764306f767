"""The `shield` section of the run config: the shield, its world model, critic and opponent model.

The knobs of `create_base_config` (`max_risk`, `shield_patience`, the modes, the credible
delta and schedule, the versions) come from the base config; the rest (horizon, search sweeps,
model sizes and training, calibration and certificate) have defaults and may be set through
`algo_params`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Any, ClassVar

from src.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_int_tuple,
    check_probability,
    fail,
)
from src.config.base import SEED_MAX
from src.config.section import Section

__all__ = [
    "CALIBRATION_BINS",
    "CALIBRATION_WINDOW",
    "CEM_ELITES",
    "CEM_ITERATIONS",
    "CEM_SAMPLES",
    "DEFAULT_CANDIDATES",
    "RETIRED_KEYS",
    "ShieldConfig",
]

DEFAULT_CANDIDATES = 16
"""`ShieldConfig.candidates` unless set (Box actions only)."""
CEM_ITERATIONS = 3
"""Box actions: rounds of the cross-entropy search for the model-chosen safe candidate."""
CEM_SAMPLES = 32
"""Box actions: joint actions judged per round of the cross-entropy search."""
CEM_ELITES = 4
"""Box actions: least-risk joint actions of a round whose mean and spread the next round
samples from."""
CALIBRATION_WINDOW = 8192
"""Most recent executed decisions with a known outcome that the per-decision calibration map g
is fitted on (src/algos/shield/calibration.py)."""
CALIBRATION_BINS = 8
"""Equal-count bins of the models' risk in the calibration map; the map replaces the held-out
factor once 100 labelled decisions per bin are there. g only shapes the risk each decision
reports (U), never a decision (BENCHMARKS.md, "Shield settings against other values")."""
RETIRED_KEYS: dict[str, str] = {
    "risk_scope": "the allowance is receding; the excess budget per episode is gone",
    "search": "the search is the one-agent-at-a-time descent; judging every joint action is gone",
    "backup": "the critic's backup is the one-agent-at-a-time descent; judging every joint "
    "action is gone",
    "lookahead": "the critic values the first imagined step's successor; more imagined steps "
    "are gone",
    "calibration_window": "the calibration map only shapes the reported risk U, never a "
    "decision; its window is fixed (CALIBRATION_WINDOW)",
    "calibration_bins": "the calibration map only shapes the reported risk U, never a "
    "decision; its bins are fixed (CALIBRATION_BINS)",
}
"""Shield keys that earlier code read and that name nothing now: key -> what became of it
(docs/design.md, section 6.3, "Every option and what keeps it"). A run's recorded shield
config with one is refused naming it (`src.algos.shield.assemble.load_shield`)."""

COORDINATIONS = ("central", "decentralised")
"""Who decides in the shield (ShieldConfig.coordination)."""
LEARN_FROM = ("executed", "proposals")
"""Which action of a shielded step the base policy learns from (ShieldConfig.learn_from)."""

_positive_int = partial(check_int, low=1, high=1_000_000)
_positive = partial(check_float, low=0.0)


def _replay_size(name: str, value: Any) -> int:
    return check_int(name, value, low=2, high=10_000_000)


def _multiples(name: str, value: Any) -> tuple[float, ...]:
    requirement = "a non-empty, strictly increasing list of at most 16 numbers > 0"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise fail(name, value, requirement)
    items = [check_float(name, item, low=0.0) for item in value]
    if not 0 < len(items) <= 16 or any(b <= a for a, b in pairwise(items)):
        raise fail(name, value, requirement)
    return tuple(items)


@dataclass(frozen=True, kw_only=True)
class ShieldConfig(Section):
    """Configuration of the shield, its world model, its safety critic and its opponent model."""

    BASE_KEYS: ClassVar[tuple[str, ...]] = (
        "max_risk",
        "shield_patience",
        "shield_opponent_mode",
        "shield_reward_mode",
        "shield_credible_delta",
        "shield_credible_schedule",
        "wm_version",
        "om_version",
        "shield_version",
    )
    RECORDED_IF_SET: ClassVar[tuple[str, ...]] = ("common_plan", "certificate_family")
    RULES: ClassVar[Mapping[str, Callable[[str, Any], Any]]] = {
        "ensemble_size": _positive_int,
        "wm_hidden": check_int_tuple,
        "om_hidden": check_int_tuple,
        "wm_learning_rate": _positive,
        "om_learning_rate": _positive,
        "replay_size": _replay_size,
        "valid_fraction": check_probability,
        "model_epochs": _positive,
        "model_batch_size": _positive_int,
        "max_valid_batch": _positive_int,
        "critic_hidden": check_int_tuple,
        "critic_learning_rate": _positive,
        "critic_tau": partial(check_float, low=0.0, high=1.0),
        "critic_steps": partial(check_int, low=0, high=1_000_000),
        "critic_batch_size": _positive_int,
        "horizon": partial(check_int, low=1, high=100_000),
        "intervention_penalty": partial(check_float, low=0.0, open_low=False),
        "imitation": partial(check_float, low=0.0, open_low=False),
        "learn_from": partial(check_choice, choices=LEARN_FROM),
        "search_sweeps": partial(check_int, low=1, high=100),
        "coordination": partial(check_choice, choices=COORDINATIONS),
        "opponent_samples": partial(check_int, low=1, high=100_000),
        "common_plan": check_bool,
        "adapt_rate": partial(check_float, low=0.0, open_low=False),
        "calibration_episodes": partial(check_int, low=0, high=1_000_000),
        "calibration_seed_offset": partial(check_int, low=0, high=SEED_MAX),
        "certify_multiples": _multiples,
        "certificate_family": partial(check_int, low=1, high=1_000_000),
        "candidates": partial(check_int, low=1, high=10_000),
    }

    max_risk: float
    """The constraint: P(violation within the constraint horizon) <= max_risk, which the
    allowance adapts to in training and the certificate tests."""
    shield_patience: int
    """Policy updates during which the shield only watches and trains its models."""
    shield_opponent_mode: str
    """`coordination: decentralised`: how far the opponent model's predictions of the other
    agents are trusted (mixed with uniform): `model`, `uniform` or `monotone_floor`."""
    shield_reward_mode: str
    """Upper bound of the logged calibration (`bounds.risk_bound`); only its default,
    `bayesian`, is accepted (`src.config.base`)."""
    shield_credible_delta: float
    """Failure probability delta of the certificate (and the confidence of the logged
    calibration)."""
    shield_credible_schedule: str
    """How the logged calibration spreads delta over the model fits (`bounds.credible_delta`);
    only its default, `summable`, is accepted (`src.config.base`)."""
    wm_version: str
    """World-model implementation, a key of `WM_VERSIONS`."""
    om_version: str
    """Opponent-model implementation, a key of `OM_VERSIONS`."""
    shield_version: str
    """Shield implementation, a key of `SHIELD_VERSIONS`."""

    ensemble_size: int = 4
    """World-model (and safety-critic) ensemble members; the models' risk q is the worst
    member's."""
    wm_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of each world-model member."""
    om_hidden: tuple[int, ...] = (64,)
    """Hidden layer widths of the opponent model."""
    wm_learning_rate: float = 3e-3
    """Adam learning rate of the world model."""
    om_learning_rate: float = 3e-3
    """Adam learning rate of the opponent model."""
    replay_size: int = 50_000
    """Capacity of the replay of real transitions (training and validation parts together)."""
    valid_fraction: float = 0.1
    """Probability that a real transition is held out for validation instead of training."""
    model_epochs: float = 16.0
    """Model samples per update, in multiples of the transitions collected since the last one."""
    model_batch_size: int = 256
    """Minibatch size of model training (per ensemble member)."""
    max_valid_batch: int = 4096
    """Most recent validation transitions scored per update (bounds the cost of validation)."""
    critic_hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of each member's safety critic V_m (least risk-to-go)."""
    critic_learning_rate: float = 1e-3
    """Adam learning rate of the safety critic."""
    critic_tau: float = 0.05
    """Step of the critic's slowly moving target copy towards the critic after each step."""
    critic_steps: int = 16
    """Value-iteration steps of the safety critic per policy update."""
    critic_batch_size: int = 64
    """Replay transitions per member and value-iteration step (both ends are used)."""
    horizon: int = 10
    """Steps H the calibrated risk U covers: at every step, the next H steps of the executed
    joint action followed by the safest continuation; the critic learns the least risk over
    h <= H steps. It may exceed the training cap (the evaluation runs episodes longer)."""
    learn_from: str = "executed"
    """The base policy learns from the `executed` joint action (the shield's correction
    is treated as the policy's own action) or from its own `proposals` (the shield as part of
    the environment)."""
    intervention_penalty: float = 0.05
    """Reward taken from an agent for every step the shield overrides its action, so that
    states which need an override lose value and the policy learns to avoid them."""
    imitation: float = 0.5
    """`learn_from: executed`: weight of the imitation loss -log pi(executed | obs) on the
    agent-steps the shield overrode (mean over the minibatch's agent-steps), so that the policy
    learns the shield's corrections beyond PPO's clipped step; 0: none."""
    search_sweeps: int = 2
    """The length of the two descents over joint actions, one agent's action changed at a
    time. The shield's search, when neither the proposal nor a change of one agent's action is
    within the allowance, descends on the risk from the safest of those options, each step to
    the one-agent change of least risk (n_agents * (n_actions - 1) joint actions judged at the
    first step, (n_agents - 1) * (n_actions - 1) at later ones: the agent that just moved is
    not judged again), at most `search_sweeps` * n_agents steps, until one is within the
    allowance, which it executes, else the least risk found (the fallback). The safety
    critic's backup finds its least risk over joint actions by descending from the joint
    action the replay recorded, the agents in turn, at most `search_sweeps` sweeps over them
    (at most `search_sweeps` * n_agents * (n_actions - 1) + 1 joint actions, linear in the
    team; an upper bound, so the critic errs towards more risk)."""
    coordination: str = "central"
    """Who decides. `central`: one shield judges the team's joint action with every agent's
    actual proposal. `decentralised`: each agent's shield sees only its own proposal and
    judges its own action by its expected risk over the others' actions predicted by the
    opponent model (`om_version`), mixed with uniform by the weight `shield_opponent_mode`
    sets; no coordinator, work linear in the team (docs/design.md, section 6.3)."""
    opponent_samples: int = 8
    """`decentralised`: completions of the others' actions per judged own action: all
    n_actions ** (n_agents - 1), weighted by their probability, when there are at most this
    many; else this many by Latin hypercube sampling (the work per decision is proportional)."""
    common_plan: bool = False
    """`decentralised`, Discrete actions: where the joint action the opponent model predicts
    (each agent's most likely action, from its own observation) is beyond the allowance, every
    agent executes its part of the common plan, the descent on the risk from that joint
    action, which every agent computes alike from the joint observation it knows (no
    coordinator); elsewhere each agent decides alone."""
    adapt_rate: float = 0.1
    """Step of the log-allowance per finished training episode after arming,
    log a += adapt_rate * (max_risk - violated), violated: within the constraint horizon
    (the certificate's); starting at max_risk; 0 keeps the allowance at
    max_risk."""
    calibration_episodes: int = 200
    """Calibration episodes n per tested allowance of the certificate (run r uses reset
    seeds calibration_seed_offset + r * n + i); 0: no test, the run has no certificate."""
    calibration_seed_offset: int = 20_000_000
    """Reset seed of run 0's first calibration episode; the workflow refuses ranges that
    meet the training, evaluation or video seeds or a reserved range (`src.seeds`)."""
    certify_multiples: tuple[float, ...] = (0.3, 0.4, 0.55, 0.7, 0.85, 1.0)
    """The allowances the certificate tests, most cautious first, as multiples of the
    allowance training settled at (its geometric mean over the second half of the armed
    updates)."""

    certificate_family: int = 1
    """The number of certificates that share `shield_credible_delta`: the certificate tests at
    delta / certificate_family (`certificate_delta`), so that the experiment's certificates
    all hold together with probability >= 1 - delta (Bonferroni). The workflow sets it to its
    number of certificates where the config asks for `joint_certificates`; 1: each
    certificate holds on its own at 1 - delta."""

    candidates: int = DEFAULT_CANDIDATES
    """Box actions: joint actions the central shield samples from the agents' Gaussian
    policies per refused proposal (besides the proposal and the cross-entropy search's
    safest action), own actions the decentralised shield samples from a refused agent's
    policy (besides its proposal), and uniform draws in the Box per state of the critic's
    backup (besides the recorded action); the default from `benchmarks/shield_box.py`
    (docs/design.md, section 6.3). Discrete actions do not read it."""

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain values, but those of `RECORDED_IF_SET` and `candidates` only
        off their defaults: the records of a shield that does not read them are what they were
        before them."""
        out = super().to_dict()
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in (*self.RECORDED_IF_SET, "candidates"):
            if out[name] == defaults[name]:
                del out[name]
        return out

    def check_box(self) -> None:
        """Refuse, naming the key, the settings the shield on Box actions does not have: it
        judges joint actions from a sampled candidate set, one decision at a time."""
        if self.learn_from != "executed":
            raise fail(
                "learn_from",
                self.learn_from,
                "'executed' on Box actions (the shield judges sampled candidate joint actions "
                "there, not enumerated ones)",
            )

    @property
    def certificate_delta(self) -> float:
        """The level the certificate tests at: delta / `certificate_family`."""
        return self.shield_credible_delta / self.certificate_family

    def calibration_seeds(self, run_idx: int) -> range:
        """Reset seeds of run `run_idx`'s calibration episodes."""
        first = self.calibration_seed_offset + run_idx * self.calibration_episodes
        return range(first, first + self.calibration_episodes)

    def check_against(self, *, n_agents: int, max_steps: int, box: bool = False) -> None:
        """Refuse settings this env cannot meet, naming the key, the value and what would work.

        The risk horizon may not be longer than the episode; Box actions (`box`) have their own
        limits (`check_box`).
        """
        if self.horizon > max_steps:
            raise fail("horizon", self.horizon, f"at most the episode cap max_steps={max_steps}")
        if self.coordination == "decentralised" and n_agents < 2:
            raise fail("n_agents", n_agents, "at least 2 for coordination 'decentralised'")
        if self.common_plan and (self.coordination != "decentralised" or box):
            raise fail(
                "common_plan",
                self.common_plan,
                "false unless the shield is decentralised (shield_dec) on Discrete actions, "
                "the only shield that reads it",
            )
        if box:
            self.check_box()
            return
