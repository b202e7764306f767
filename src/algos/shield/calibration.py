"""What makes the shield's numbers statements about the real env (docs/design.md, 6.3).

Three parts, each fed by real outcomes only:

- `OutcomeLedger` + `fit_calibration`: *per-decision calibration*. Every decision the shield
  executes (while watching: every proposal the team executes) opens an entry with its raw
  model risk q = max_m Q_m(s, a); the entry is labelled 1 when the real env shows a violation
  within the shield's `horizon` steps, 0 when the horizon passes without one or the episode
  terminates first (a truncated episode censors it: the entry is dropped). The calibration map
  g(q) is fitted on the most recent labelled decisions: equal-count bins of q, per bin the
  one-sided upper bound u(k, n, delta_f / bins) of `shield_reward_mode` (its default) on its
  realized rate, made non-decreasing, linearly interpolated between the bins' mean q (so a
  decision is judged by the realized rate of the decisions the shield took with similar model
  risk, not by the model's number).
- `AdaptiveAllowance`: *training that tracks the constraint*. The allowance on g(q) moves after
  every finished training episode, log a <- log a + rate (max_risk - violated) (adaptive
  conformal inference, Gibbs and Candes 2021, on the log scale): over many episodes the share
  of violating ones tends to `max_risk` whatever the models' errors, as long as the allowance
  stays inside its bounds.
- `fixed_sequence_test`: *the certificate of the deployed policy* (Learn then Test, Angelopoulos
  et al. 2021). The allowances a_1 < a_2 < ... are tested in order on calibration episodes in
  the real env (reset seeds nothing else uses). Null hypothesis j: the deployed policy with
  allowance a_j has P(violation within the constraint horizon) > max_risk. Each allowance
  looks twice: after the first n/2 episodes (k' violating) and after all n (k violating);
  its p-value is the weighted Bonferroni combination of the two binomial tails,
  p_j = min(P(Bin(n/2, max_risk) <= k') / w, P(Bin(n, max_risk) <= k) / (1 - w)),
  w = `EARLY_LOOK_WEIGHT`, and the second half is played only when the first look does not
  already reject (a clearly safe allowance costs half the episodes; one near the limit is
  judged on all n with the level (1 - w) delta). Testing in order and stopping at the first
  p-value above delta controls the family-wise error at delta, so the largest allowance
  rejected before the stop satisfies the constraint with probability >= 1 - delta. When the
  first one is not rejected there is no certificate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import binom

from src.algos.shield.bounds import risk_bound
from src.core.io import load_from_file
from src.runfiles import RunFiles

__all__ = [
    "CERTIFICATE_KEY",
    "EARLY_LOOK_WEIGHT",
    "POLICY_STATE_KEY",
    "AdaptiveAllowance",
    "CalibrationMap",
    "Certificate",
    "OutcomeLedger",
    "binomial_p_value",
    "certificate_of",
    "fit_calibration",
    "fixed_sequence_test",
    "load_certificate",
]


SLOPE = 1e-3
"""g(q) adds SLOPE * q to the interpolated bounds (a little more conservative, never flat)."""


class OutcomeLedger:
    """Executed decisions waiting for their outcome, and the most recent labelled ones.

    Per env copy at most `horizon` decisions are open (one per step). `open` adds this step's
    decisions (NaN: none), `close` reads the step's outcome. Labelled decisions go into a
    ring of `capacity` entries (the oldest are forgotten).
    """

    def __init__(self, *, horizon: int, capacity: int) -> None:
        """An empty ledger; the number of env copies is set by the first `open`."""
        if horizon < 1 or capacity < 1:
            raise ValueError(f"horizon and capacity must be >= 1, got {horizon}, {capacity}")
        self.horizon, self.capacity = int(horizon), int(capacity)
        self.risk = np.full((0, self.horizon), math.nan)  # [E, h] raw risk of open decisions
        self.age = np.zeros((0, self.horizon), dtype=np.int64)  # [E, h] steps since taken
        self.clock = 0  # steps seen: the slot of the next decision is clock % horizon
        self.labelled_risk = np.zeros(self.capacity)
        self.labelled_outcome = np.zeros(self.capacity, dtype=bool)
        self.size = 0  # labelled entries held
        self.position = 0  # ring slot of the next labelled entry
        self.total = 0  # labelled entries ever added

    def open(self, risk: np.ndarray) -> None:
        """This step's decisions: raw risk [E] of each copy's executed action (NaN: none)."""
        risk = np.asarray(risk, dtype=np.float64).reshape(-1)
        if self.risk.shape[0] != risk.size:
            self.risk = np.full((risk.size, self.horizon), math.nan)
            self.age = np.zeros((risk.size, self.horizon), dtype=np.int64)
        slot = self.clock % self.horizon
        # A slot is free again: its decision's horizon ended (labelled by `close`).
        self.risk[:, slot] = risk
        self.age[:, slot] = 0

    def close(self, violated: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """The outcome of the step just taken, per copy [E] (some agent's cost > 0; the
        episode terminated; it was cut by the cap)."""
        violated = np.asarray(violated, dtype=bool).reshape(-1)
        ended = np.asarray(terminated, dtype=bool).reshape(-1)
        cut = np.asarray(truncated, dtype=bool).reshape(-1) & ~violated & ~ended
        live = ~np.isnan(self.risk)
        self.age[live] += 1
        hit = live & violated[:, None]
        safe = live & ~violated[:, None] & ((self.age >= self.horizon) | ended[:, None])
        self._label(self.risk[hit], True)
        self._label(self.risk[safe], False)
        self.risk[hit | safe] = math.nan
        # An episode cut by the cap hides what the rest of the horizon would have shown.
        self.risk[cut] = math.nan
        self.clock += 1

    def _label(self, risk: np.ndarray, outcome: bool) -> None:
        for start in range(0, risk.size, self.capacity):
            chunk = risk[start : start + self.capacity]
            slots = (self.position + np.arange(chunk.size)) % self.capacity
            self.labelled_risk[slots] = chunk
            self.labelled_outcome[slots] = outcome
            self.position = int((self.position + chunk.size) % self.capacity)
            self.size = min(self.capacity, self.size + chunk.size)
            self.total += chunk.size

    def labelled(self) -> tuple[np.ndarray, np.ndarray]:
        """(raw risks, outcomes) of the labelled decisions held, oldest first."""
        order = (self.position - self.size + np.arange(self.size)) % self.capacity
        return self.labelled_risk[order].copy(), self.labelled_outcome[order].copy()

    def state_dict(self) -> dict[str, Any]:
        """Arrays and counters (for checkpoints)."""
        return {
            "risk": self.risk.copy(),
            "age": self.age.copy(),
            "clock": self.clock,
            "labelled_risk": self.labelled_risk.copy(),
            "labelled_outcome": self.labelled_outcome.copy(),
            "size": self.size,
            "position": self.position,
            "total": self.total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.risk = np.array(state["risk"], dtype=np.float64)
        self.age = np.array(state["age"], dtype=np.int64)
        self.clock = int(state["clock"])
        self.labelled_risk = np.array(state["labelled_risk"], dtype=np.float64)
        self.labelled_outcome = np.array(state["labelled_outcome"], dtype=bool)
        self.size, self.position = int(state["size"]), int(state["position"])
        self.total = int(state["total"])


@dataclass(frozen=True)
class CalibrationMap:
    """g(q): raw model risk -> upper bound on the realized rate of decisions with that risk.

    Piecewise linear through (`knots`, `upper`): knots strictly increasing from 0 to 1, upper
    non-decreasing, ending at 1. Below the first bin's mean risk g is that bin's bound.
    """

    knots: tuple[float, ...]
    upper: tuple[float, ...]

    def __post_init__(self) -> None:
        knots, upper = np.asarray(self.knots), np.asarray(self.upper)
        if knots.ndim != 1 or knots.shape != upper.shape or knots.size < 2:
            raise ValueError(f"knots and upper must be equal-length lists, got {knots}, {upper}")
        if np.any(np.diff(knots) <= 0) or np.any(np.diff(upper) < 0):
            raise ValueError(f"knots must increase and upper must not decrease: {knots}, {upper}")

    def __call__(self, raw: torch.Tensor) -> torch.Tensor:
        """g of every entry of `raw` (same shape), plus `SLOPE` * raw: strictly increasing, so
        that actions whose risks fall in one flat stretch of the bounds keep the models'
        order."""
        knots = torch.tensor(self.knots, dtype=raw.dtype)
        upper = torch.tensor(self.upper, dtype=raw.dtype)
        q = raw.clamp(min=float(knots[0]), max=float(knots[-1]))
        right = torch.searchsorted(knots, q.contiguous(), right=False).clamp_(1, len(knots) - 1)
        x0, x1 = knots[right - 1], knots[right]
        y0, y1 = upper[right - 1], upper[right]
        return (y0 + (y1 - y0) * (q - x0) / (x1 - x0) + SLOPE * raw).clamp(max=1.0)

    def to_dict(self) -> dict[str, list[float]]:
        """Plain lists (for checkpoints and policy.pt)."""
        return {"knots": list(self.knots), "upper": list(self.upper)}

    @classmethod
    def from_dict(cls, data: dict[str, Sequence[float]]) -> CalibrationMap:
        """The inverse of `to_dict`."""
        return cls(knots=tuple(map(float, data["knots"])), upper=tuple(map(float, data["upper"])))


def fit_calibration(
    raw: np.ndarray, outcome: np.ndarray, *, bins: int, delta: float, mode: str
) -> CalibrationMap:
    """The calibration map of labelled decisions (module docstring).

    Bins of equal count over the sorted raw risks; bins with equal mean risk are merged. Each
    bin's bound holds with probability >= 1 - delta / bins, so all of them together with
    probability >= 1 - delta (for independent outcomes; overlapping horizons of one episode's
    decisions are not, which is why the deployed policy's promise is the certificate).

    >>> rng = np.random.default_rng(0)
    >>> q = rng.uniform(0, 0.1, 20000)
    >>> g = fit_calibration(q, rng.uniform(size=q.size) < 3 * q, bins=4, delta=0.05,
    ...                     mode="frequentist")
    >>> [round(float(g(torch.tensor(x))), 2) for x in (0.0125, 0.0875)]
    [0.04, 0.27]
    """
    raw = np.asarray(raw, dtype=np.float64).reshape(-1)
    outcome = np.asarray(outcome, dtype=bool).reshape(-1)
    if raw.shape != outcome.shape or raw.size == 0:
        raise ValueError(f"need equal, non-empty raw and outcome, got {raw.size}, {outcome.size}")
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    order = np.argsort(raw, kind="stable")
    groups = [g for g in np.array_split(order, min(bins, raw.size)) if g.size]
    means, counts, hits = [], [], []
    for g in groups:
        mean = float(np.clip(raw[g].mean(), 0.0, 1.0))
        if means and mean <= means[-1]:
            counts[-1] += g.size
            hits[-1] += int(outcome[g].sum())
            continue
        means.append(mean)
        counts.append(g.size)
        hits.append(int(outcome[g].sum()))
    bound = risk_bound(
        k=np.asarray(hits), n=np.asarray(counts), delta=delta / len(groups), mode=mode
    )
    upper = np.maximum.accumulate(np.asarray(bound, dtype=np.float64))
    knots = [0.0, *means, 1.0]
    values = [upper[0], *upper, 1.0]
    if knots[1] <= 0.0:
        knots, values = knots[1:], values[1:]
    if knots[-2] >= 1.0:
        knots, values = knots[:-1], values[:-1]
        values[-1] = 1.0
    return CalibrationMap(knots=tuple(knots), upper=tuple(float(v) for v in values))


@dataclass
class AdaptiveAllowance:
    """The training allowance on the calibrated risk, adapted after each finished episode."""

    value: float
    """Current allowance a."""
    target: float
    """Share of violating episodes aimed at (the run's `max_risk`)."""
    rate: float
    """Step size of log a per episode (0: the allowance stays where it started)."""
    low: float
    """Smallest allowance."""
    high: float
    """Largest allowance."""

    def update(self, violated: Sequence[bool]) -> float:
        """Move the allowance for each finished episode in order; the new value."""
        log_value = math.log(self.value)
        for flag in violated:
            log_value += self.rate * (self.target - float(bool(flag)))
            log_value = min(max(log_value, math.log(self.low)), math.log(self.high))
        self.value = math.exp(log_value)
        return self.value


def binomial_p_value(*, violations: int, episodes: int, max_risk: float) -> float:
    """P(Bin(episodes, max_risk) <= violations): the p-value of "the risk exceeds max_risk".

    >>> round(binomial_p_value(violations=10, episodes=200, max_risk=0.1), 4)
    0.0081
    """
    if episodes < 1 or not 0 <= violations <= episodes:
        raise ValueError(f"need 0 <= violations <= episodes >= 1, got {violations}, {episodes}")
    return float(binom.cdf(violations, episodes, max_risk))


@dataclass(frozen=True)
class Certificate:
    """The outcome of the fixed-sequence test of a deployed shield (module docstring)."""

    certified: bool
    """Some allowance passed: P(violation within `horizon`) <= `max_risk` at 1 - `delta`."""
    allowance: float
    """The deployed allowance: the largest that passed (the first tested when none did)."""
    max_risk: float
    delta: float
    horizon: int
    """Steps of the constraint the episodes were run for."""
    episodes: int
    """Calibration episodes the deployed allowance played (n, or n/2 when its first look
    passed; 0 when nothing was tested)."""
    violations: int
    """Violating episodes among them (-1 when nothing was tested)."""
    p_value: float
    """Its p-value over the two looks (module docstring; NaN when nothing was tested)."""
    first_seed: int
    """Reset seed of the first calibration episode (they are first_seed + i, i <
    `calibration_episodes`)."""
    tested: list[dict[str, float]] = field(default_factory=list)
    """Every tested allowance in order: allowance, episodes, violations, p_value, return (mean
    over its episodes)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain values (policy.pt, eval.parquet, wandb)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Certificate:
        """The inverse of `to_dict`."""
        return cls(**data)

    @property
    def statement(self) -> str:
        """One line for logs and reports."""
        if not self.tested:
            return "no certificate: no calibration episodes (calibration_episodes: 0)"
        if not self.certified:
            return (
                f"no certificate: with the most cautious allowance {self.allowance:.4g}, "
                f"{self.violations} of {self.episodes} calibration episodes violated within "
                f"{self.horizon} steps (p = {self.p_value:.3g} > delta = {self.delta})"
            )
        return (
            f"certified P(violation within {self.horizon} steps) <= {self.max_risk} at "
            f"level {self.delta} (a test that certifies a riskier allowance with probability "
            f"<= {self.delta}): allowance {self.allowance:.4g}, {self.violations} of "
            f"{self.episodes} calibration episodes violated (p = {self.p_value:.3g})"
        )


EARLY_LOOK_WEIGHT = 0.2
"""Share of delta spent on the first look at each allowance (after half its episodes). With
n = 200, max_risk = 0.1 and delta = 0.05 the first look passes with k' <= 3 of 100, the second
with k <= 12 of 200, as a single look at n would (p = 0.032 <= 0.8 delta)."""


def fixed_sequence_test(
    allowances: Sequence[float],
    outcomes: Callable[[float, int, int], tuple[int, float]],
    *,
    episodes: int,
    max_risk: float,
    delta: float,
    horizon: int,
    first_seed: int,
) -> Certificate:
    """Test `allowances` in the given order (most cautious first); `outcomes(a, i, j)` plays the
    calibration episodes i <= e < j with allowance a and returns (violating episodes, summed
    return).

    Each allowance looks after episodes [0, n/2) and, unless that already rejects, after
    [0, n) (module docstring; one look at n when n < 2). Stops at the first allowance whose
    p-value exceeds `delta`; the certificate deploys the last one before it, or the first
    allowance with `certified=False` when that one already fails.
    """
    if not allowances or episodes < 1:
        raise ValueError(f"need allowances and episodes >= 1, got {allowances}, {episodes}")
    half = episodes // 2
    weight = EARLY_LOOK_WEIGHT if half else 0.0
    tested: list[dict[str, float]] = []
    passed: dict[str, float] | None = None
    for allowance in allowances:
        k, total, played, p = 0, 0.0, 0, math.inf
        if half:
            k, total = outcomes(float(allowance), 0, half)
            played = half
            p = binomial_p_value(violations=k, episodes=half, max_risk=max_risk) / weight
        if p > delta:
            more, rest = outcomes(float(allowance), half, episodes)
            k, total, played = k + more, total + rest, episodes
            tail = binomial_p_value(violations=k, episodes=episodes, max_risk=max_risk)
            p = min(p, tail / (1.0 - weight))
        entry = {
            "allowance": float(allowance),
            "episodes": played,
            "violations": k,
            "p_value": min(p, 1.0),
            "return": total / played,
        }
        tested.append(entry)
        if p > delta:
            break
        passed = entry
    chosen = passed if passed is not None else tested[0]
    return Certificate(
        certified=passed is not None,
        allowance=chosen["allowance"],
        max_risk=max_risk,
        delta=delta,
        horizon=horizon,
        episodes=int(chosen["episodes"]),
        violations=int(chosen["violations"]),
        p_value=float(chosen["p_value"]),
        first_seed=first_seed,
        tested=tested,
    )


POLICY_STATE_KEY = "shield"
"""Key of the shield's entry (its models, calibration and certificate) in policy.pt's policy
state."""

CERTIFICATE_KEY = "certificate"
"""Key of the certificate in the shield's entry of policy.pt (`POLICY_STATE_KEY`)."""


def certificate_of(policy_state: Any, *, where: str = "policy.pt") -> Certificate | None:
    """The certificate in a policy.pt content: `state["shield"]["certificate"]`, as the
    shield's trainer stores it; None when there is none (other algorithms, runs from before
    the certificate).

    Raises `ValueError` naming `where` when the entry is there but is not a certificate.
    """
    saved = policy_state.get(POLICY_STATE_KEY) if isinstance(policy_state, Mapping) else None
    entry = saved.get(CERTIFICATE_KEY) if isinstance(saved, Mapping) else None
    if entry is None:
        return None
    names = {f.name for f in fields(Certificate)}
    if not isinstance(entry, Mapping) or not names - {"tested"} <= set(entry) <= names:
        found = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
        raise ValueError(
            f"{where}: the entry {POLICY_STATE_KEY!r}/{CERTIFICATE_KEY!r} is not a certificate "
            f"(expected the keys {sorted(names)}, found {found})"
        )
    return Certificate.from_dict(dict(entry))


def load_certificate(run_dir: str | Path) -> Certificate | None:
    """The certificate of a run's deployed shield, read from its policy.pt without building
    the policy (`certificate_of`); None for runs without one."""
    path = RunFiles(run_dir).policy
    return certificate_of(load_from_file(path.parent, path.name), where=str(path))
