"""The shield's promise about the real env: per-decision calibration on real outcomes, the
allowance that adapts to the realized violation rate, and the fixed-sequence certificate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from src.algos.shield.calibration import (
    AdaptiveAllowance,
    CalibrationMap,
    Certificate,
    OutcomeLedger,
    binomial_p_value,
    fit_calibration,
    fixed_sequence_test,
)


def _step(ledger: OutcomeLedger, risk: list[float], *, violated=(), ended=(), cut=()) -> None:
    e = len(risk)
    ledger.open(np.asarray(risk))
    flags = [np.isin(np.arange(e), list(which)) for which in (violated, ended, cut)]
    ledger.close(*flags)


def test_ledger_labels_a_decision_by_a_violation_within_its_horizon():
    ledger = OutcomeLedger(horizon=3, capacity=100)
    _step(ledger, [0.1, 0.2])  # t=1
    _step(ledger, [0.3, math.nan])  # t=2: copy 1 made no decision
    _step(ledger, [0.4, 0.5], violated=[0])  # t=3: copy 0 violates
    risk, outcome = ledger.labelled()
    # Copy 0: its decisions of t=1, 2, 3 all saw the violation within 3 steps.
    assert sorted(zip(risk.tolist(), outcome.tolist(), strict=True)) == [
        (0.1, True),
        (0.2, False),
        (0.3, True),
        (0.4, True),
    ]
    # Copy 1's decision of t=1 had its 3 steps without a violation (0.2: False above); its
    # decisions of t=3, 4, 5 see the violation at t=5; copy 0's of t=4, 5 are still open.
    _step(ledger, [0.6, 0.7])
    _step(ledger, [0.8, 0.9], violated=[1])
    risk, outcome = ledger.labelled()
    labelled = dict(zip(risk.tolist(), outcome.tolist(), strict=True))
    assert labelled[0.5] is True and labelled[0.7] is True and labelled[0.9] is True
    assert 0.6 not in labelled and 0.8 not in labelled
    assert sorted(ledger.risk[~np.isnan(ledger.risk)].tolist()) == [0.6, 0.8]


def test_ledger_drops_decisions_cut_by_the_cap_and_counts_terminations_as_safe():
    ledger = OutcomeLedger(horizon=5, capacity=100)
    _step(ledger, [0.1, 0.2])
    _step(ledger, [0.3, 0.4], ended=[0], cut=[1])
    risk, outcome = ledger.labelled()
    # Copy 0's episode terminated: nothing can happen any more, both decisions are safe.
    # Copy 1's was truncated: what its horizon would have shown is unknown, both dropped.
    assert sorted(risk.tolist()) == [0.1, 0.3] and not outcome.any()
    assert np.isnan(ledger.risk).all()


def test_ledger_keeps_the_most_recent_labelled_decisions_and_restores_its_state():
    ledger = OutcomeLedger(horizon=1, capacity=4)
    for t in range(10):
        _step(ledger, [t / 10], violated=[0] if t % 2 else [])
    risk, outcome = ledger.labelled()
    assert risk.tolist() == [0.6, 0.7, 0.8, 0.9] and outcome.tolist() == [0, 1, 0, 1]
    assert ledger.total == 10
    copy = OutcomeLedger(horizon=1, capacity=4)
    copy.load_state_dict(ledger.state_dict())
    assert np.array_equal(copy.labelled()[0], risk) and copy.total == 10


def test_ledger_labels_across_episode_ends_the_ring_and_a_restored_state():
    ledger = OutcomeLedger(horizon=2, capacity=5)
    _step(ledger, [0.1, 0.2])  # t=1
    _step(ledger, [0.3, 0.4], ended=[0])  # t=2: copy 0 terminates
    _step(ledger, [0.5, 0.6], violated=[1], cut=[1])  # t=3: copy 1 violates at the cap
    risk, outcome = ledger.labelled()
    assert sorted(zip(risk.tolist(), outcome.tolist(), strict=True)) == [
        (0.1, False),
        (0.2, False),  # its 2 steps passed at t=2
        (0.3, False),
        (0.4, True),
        (0.6, True),
    ]
    state = ledger.state_dict()
    _step(ledger, [0.7, 0.8], cut=[0])  # t=4: 0.5's horizon passed; 0.7 cut
    _step(ledger, [0.9, 1.0])  # t=5: 0.8's horizon passed
    # The ring keeps the 5 most recent labels.
    risk, outcome = ledger.labelled()
    assert ledger.total == 7 and risk.size == 5
    assert risk[-2:].tolist() == [0.5, 0.8] and not outcome[-2:].any()
    # A restored ledger continues bit for bit.
    resumed = OutcomeLedger(horizon=2, capacity=5)
    resumed.load_state_dict(state)
    _step(resumed, [0.7, 0.8], cut=[0])
    _step(resumed, [0.9, 1.0])
    for a, b in zip(resumed.state_dict().values(), ledger.state_dict().values(), strict=True):
        np.testing.assert_array_equal(a, b)  # NaN (no open decision) equals NaN


def test_calibration_corrects_a_model_that_under_predicts_threefold():
    rng = np.random.default_rng(0)
    true = rng.uniform(0.0, 0.3, size=40_000)
    raw = true / 3.0  # the model says a third of the real risk
    outcome = rng.uniform(size=true.size) < true
    g = fit_calibration(raw, outcome, bins=8, delta=0.05, mode="frequentist")
    order = np.argsort(raw)
    for chunk in np.array_split(order, 8):
        calibrated = g(torch.from_numpy(raw[chunk])).numpy()
        # Per bin of decisions: the calibrated risk covers the realized rate ...
        assert calibrated.mean() >= outcome[chunk].mean()
        # ... and is close to the true risk, not to the model's third of it.
        assert abs(calibrated.mean() - true[chunk].mean()) < 0.03
    assert float(g(torch.tensor(0.05))) > 2.5 * 0.05


@pytest.mark.parametrize("mode", ["bayesian", "frequentist"])
def test_calibration_bounds_hold_at_their_confidence_over_many_samples(mode):
    # A model whose risk is right on average but noisy: g must cover the realized rate of every
    # bin in at least 1 - delta of the samples (all bins together).
    delta, misses, trials = 0.1, 0, 300
    rng = np.random.default_rng(1)
    for _ in range(trials):
        true = rng.uniform(0.0, 0.2, size=2000)
        raw = np.clip(true + rng.normal(0, 0.02, size=true.size), 0, 1)
        outcome = rng.uniform(size=true.size) < true
        g = fit_calibration(raw, outcome, bins=4, delta=delta, mode=mode)
        order = np.argsort(raw, kind="stable")
        for chunk in np.array_split(order, 4):
            if g(torch.from_numpy(raw[chunk])).numpy().mean() < true[chunk].mean():
                misses += 1
                break
    assert misses / trials <= delta


def test_each_bins_bound_holds_at_delta_over_the_number_of_bins() -> None:
    """Two bins of 100 clean decisions each at delta 0.1: each bin's Clopper-Pearson bound is
    at delta / 2, 1 - 0.05 ** (1 / 100) = 0.0295130 (at delta, 1 - 0.1 ** (1 / 100) = 0.0227628)."""
    raw = np.repeat([0.1, 0.3], 100)
    g = fit_calibration(raw, np.zeros(200, bool), bins=2, delta=0.1, mode="frequentist")
    assert g.knots == pytest.approx((0.0, 0.1, 0.3, 1.0))
    assert g.upper == pytest.approx((0.0295130, 0.0295130, 0.0295130, 1.0), abs=1e-7)
    # Four bins, two of each risk (merged into two of 100): still delta / 4 each,
    # 1 - 0.025 ** (1 / 100) = 0.0362167.
    g = fit_calibration(raw, np.zeros(200, bool), bins=4, delta=0.1, mode="frequentist")
    assert g.upper == pytest.approx((0.0362167, 0.0362167, 0.0362167, 1.0), abs=1e-7)


def test_calibration_map_is_increasing_and_round_trips():
    g = CalibrationMap(knots=(0.0, 0.1, 1.0), upper=(0.2, 0.2, 1.0))
    values = g(torch.tensor([0.0, 0.05, 0.1, 0.5, 1.0], dtype=torch.float64)).numpy()
    assert np.all(np.diff(values) > 0)  # strictly: the flat stretch keeps the models' order
    assert values[0] == pytest.approx(0.2) and values[-1] == pytest.approx(1.0)
    assert CalibrationMap.from_dict(g.to_dict()) == g
    with pytest.raises(ValueError, match="increase"):
        CalibrationMap(knots=(0.0, 0.0, 1.0), upper=(0.1, 0.2, 1.0))


def test_adaptive_allowance_brings_the_violation_share_to_the_target():
    # A toy team whose episode violates with probability 4 a (a the allowance, capped at 1).
    rng = np.random.default_rng(2)
    adaptive = AdaptiveAllowance(value=0.001, target=0.1, rate=0.1, low=1e-4, high=1.0)
    flags = []
    for _ in range(20_000):
        violated = rng.uniform() < min(1.0, 4 * adaptive.value)
        flags.append(violated)
        adaptive.update([violated])
    assert np.mean(flags[5000:]) == pytest.approx(0.1, abs=0.01)
    assert adaptive.value == pytest.approx(0.025, rel=0.5)


def test_p_value_is_the_binomial_tail():
    assert binomial_p_value(violations=0, episodes=10, max_risk=0.2) == pytest.approx(0.8**10)
    assert binomial_p_value(violations=2, episodes=100, max_risk=0.1) == pytest.approx(0.0019448847)
    with pytest.raises(ValueError, match="violations"):
        binomial_p_value(violations=11, episodes=10, max_risk=0.2)


def _known_risk_test(risks: list[float], seed: int, *, n: int = 200) -> tuple[Certificate, float]:
    rng = np.random.default_rng(seed)
    by_allowance = dict(zip(range(len(risks)), risks, strict=True))

    def outcomes(allowance: float, first: int, stop: int) -> tuple[int, float]:
        return int(rng.binomial(stop - first, by_allowance[int(allowance)])), 0.0

    certificate = fixed_sequence_test(
        [float(i) for i in range(len(risks))],
        outcomes,
        episodes=n,
        max_risk=0.1,
        delta=0.05,
        horizon=100,
        first_seed=0,
    )
    return certificate, by_allowance[int(certificate.allowance)]


def test_certificate_covers_the_true_risk_over_many_seeds():
    # Allowances whose true risks cross max_risk = 0.1; the ones just above it are the hardest
    # to refuse. A certified allowance must meet max_risk in >= 1 - delta of the seeds.
    risks = [0.02, 0.05, 0.08, 0.105, 0.12, 0.2]
    trials = 4000
    wrong = certified = 0
    for seed in range(trials):
        certificate, true_risk = _known_risk_test(risks, seed)
        certified += certificate.certified
        wrong += certificate.certified and true_risk > 0.1
    assert certified / trials > 0.95  # the safe rungs are found
    assert wrong / trials <= 0.05


def test_no_certificate_when_no_allowance_meets_the_constraint():
    certificate, _ = _known_risk_test([0.3, 0.4, 0.5], seed=0)
    assert not certificate.certified
    assert certificate.allowance == 0.0  # the most cautious one is deployed
    assert len(certificate.tested) == 1  # the sequence stops at the first failure
    assert certificate.statement.startswith("no certificate")
    assert Certificate.from_dict(certificate.to_dict()) == certificate


def test_each_allowance_looks_at_half_then_at_all_its_episodes():
    calls: list[tuple[float, int, int]] = []
    violations = {0.0: (2, 0), 1.0: (5, 6), 2.0: (7, 7)}  # per allowance, per half

    def outcomes(allowance: float, first: int, stop: int) -> tuple[int, float]:
        calls.append((allowance, first, stop))
        return violations[allowance][first // 100], 10.0 * (stop - first)

    certificate = fixed_sequence_test(
        [0.0, 1.0, 2.0],
        outcomes,
        episodes=200,
        max_risk=0.1,
        delta=0.05,
        horizon=100,
        first_seed=7,
    )
    # 2 of 100: P(Bin(100, 0.1) <= 2) / 0.2 = 0.0019 / 0.2 <= delta: no second half.
    # 11 of 200 passes on the second look (0.0168 / 0.8), 14 of 200 does not (0.0929 / 0.8).
    assert calls == [(0.0, 0, 100), (1.0, 0, 100), (1.0, 100, 200), (2.0, 0, 100), (2.0, 100, 200)]
    first, second, third = certificate.tested
    assert (first["episodes"], first["violations"]) == (100, 2)
    assert first["p_value"] == pytest.approx(
        binomial_p_value(violations=2, episodes=100, max_risk=0.1) / 0.2
    )
    assert first["p_value"] == pytest.approx(0.0097244233)
    assert (second["episodes"], second["violations"]) == (200, 11)
    assert second["p_value"] == pytest.approx(
        binomial_p_value(violations=11, episodes=200, max_risk=0.1) / 0.8
    )
    assert second["p_value"] == pytest.approx(0.0209869165)
    assert third["p_value"] > 0.05 and first["return"] == 10.0
    assert certificate.certified and certificate.allowance == 1.0
    assert (certificate.episodes, certificate.violations) == (200, 11)


@pytest.mark.parametrize(
    ("episodes", "calls", "below"),
    [
        # First look at 4 of 8, none violating: p = 0.5**4 / 0.2 = 0.3125, no second half;
        # with delta below it the second half is played (p = 0.5**8 / 0.8 passes).
        (8, [(0.0, 0, 4), (1.0, 0, 4)], ([(0.0, 0, 4), (0.0, 4, 8)], True)),
        # n = 2: the first look (1 episode) gives 0.5 / 0.2, the second 0.5**2 / 0.8 = 0.3125;
        # with delta below it the first allowance fails.
        (
            2,
            [(0.0, 0, 1), (0.0, 1, 2), (1.0, 0, 1), (1.0, 1, 2)],
            ([(0.0, 0, 1), (0.0, 1, 2)], False),
        ),
    ],
)
def test_a_p_value_equal_to_delta_rejects(
    episodes: int,
    calls: list[tuple[float, int, int]],
    below: tuple[list[tuple[float, int, int]], bool],
) -> None:
    """H_j is rejected when p_j <= delta (docs/design.md, 6.3): p_j == delta passes, on either
    look; with delta one float below p_j that look does not reject."""
    played: list[tuple[float, int, int]] = []

    def outcomes(allowance: float, first: int, stop: int) -> tuple[int, float]:
        played.append((allowance, first, stop))
        return 0, 0.0

    def sequence(delta: float) -> Certificate:
        return fixed_sequence_test(
            [0.0, 1.0],
            outcomes,
            episodes=episodes,
            max_risk=0.5,
            delta=delta,
            horizon=100,
            first_seed=0,
        )

    certificate = sequence(0.3125)
    assert played == calls
    assert [rung["p_value"] for rung in certificate.tested] == [0.3125, 0.3125]
    assert certificate.certified and certificate.allowance == 1.0
    played.clear()
    certificate = sequence(math.nextafter(0.3125, 0.0))
    assert (played[:2], certificate.certified) == below


def test_two_looks_keep_the_error_at_delta_at_the_limit():
    # Exact probability that an allowance whose risk is exactly max_risk passes: either look.
    from scipy.stats import binom

    risk, delta = 0.1, 0.05
    first_cut = max(k for k in range(101) if binom.cdf(k, 100, risk) / 0.2 <= delta)
    second_cut = max(k for k in range(201) if binom.cdf(k, 200, risk) / 0.8 <= delta)
    assert (first_cut, second_cut) == (3, 12)  # a single look at 200 passes k <= 12 as well
    early = binom.cdf(first_cut, 100, risk)
    late = sum(
        binom.pmf(k1, 100, risk) * binom.cdf(second_cut - k1, 100, risk)
        for k1 in range(first_cut + 1, second_cut + 1)
    )
    assert early + late <= delta


def test_the_allowance_adapts_to_violations_within_the_certificates_horizon():
    """A training episode counts as violating when it violated within its first H steps (the
    constraint horizon, what the certificate tests), not later; episodes that began before
    arming do not count."""
    from src.algos.shield.trainer import constraint_outcomes
    from src.records import EpisodeLog

    def episode(t_start: int, length: int, first: int) -> EpisodeLog:
        return EpisodeLog(
            env="intersection",
            algo="shield",
            run=0,
            episode=t_start,
            env_copy=0,
            t_start=t_start,
            t_end=t_start + length,
            length=length,
            team_return=0.0,
            agent_returns=(0.0, 0.0),
            cost=float(first > 0),
            violated=first > 0,
            first_violation_step=first,
            truncated_by_cap=True,
            shield_interventions=0,
        )

    episodes = [
        episode(5, 200, 40),  # before arming
        episode(10, 200, 100),  # at the horizon's last step
        episode(11, 200, 101),  # one step after it
        episode(12, 200, -1),  # safe
        episode(13, 60, 60),  # a short episode's violation
    ]
    assert constraint_outcomes(episodes, since=10, horizon=100) == [True, False, False, True]
    assert constraint_outcomes(episodes, since=10, horizon=200) == [True, True, False, True]


def test_rank_auc_is_the_share_of_positive_negative_pairs_ranked_right_ties_half():
    from src.stats import rank_auc

    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, 80) / 5.0  # many ties
    labels = rng.random(80) < 0.3
    pairs = [(p > n) + 0.5 * (p == n) for p in scores[labels] for n in scores[~labels]]
    assert rank_auc(scores, labels) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert rank_auc(np.exp(scores), labels) == pytest.approx(rank_auc(scores, labels))
    assert np.isnan(rank_auc([0.1, 0.2], [True, True]))
    with pytest.raises(ValueError, match="differ in length"):
        rank_auc([0.1, 0.2], [True])
