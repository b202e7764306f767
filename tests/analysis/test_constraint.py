"""max_risk from the run configs, pooled violation probabilities, the constraint's verdict."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy.stats import beta

from src.analysis.aggregate import CONFIGS_METADATA_KEY
from src.analysis.constraint import (
    CertificateFamily,
    between_runs,
    certificate_family,
    compare_policies,
    constraint_horizons,
    constraint_status,
    judged_horizon,
    max_risk_by_env,
    max_risk_of_runs,
    pooled_rate,
    pooled_violations,
    run_configs,
    run_constraint_horizon,
)
from src.stats import clopper_pearson_interval


def config(env: str, algo: str, run: int, max_risk: float) -> dict:
    return {"env_name": env, "algo": algo, "run_idx": run, "max_risk": max_risk}


def test_max_risk_comes_from_the_configs_in_the_metadata() -> None:
    configs = [
        config("grid", "ippo", 0, 0.1),
        config("grid", "shield", 0, 0.05),
        config("spread", "ippo", 0, 0.2),
    ]
    table = pa.table({"x": [1]}).replace_schema_metadata(
        {CONFIGS_METADATA_KEY: json.dumps(configs)}
    )
    assert run_configs(table) == configs
    # Runs of one env that disagree: each value is kept.
    assert max_risk_by_env(configs) == {"grid": (0.05, 0.1), "spread": (0.2,)}
    assert max_risk_of_runs(configs)["max_risk"].tolist() == [0.1, 0.05, 0.2]
    assert run_configs(pa.table({"x": [1]})) == []
    bad = table.replace_schema_metadata({CONFIGS_METADATA_KEY: json.dumps({"a": 1})})
    with pytest.raises(ValueError, match="JSON list of run configs"):
        run_configs(bad)


def horizon_config(algo: str, run: int, horizon: int | None, *, cap: int | None = 100) -> dict:
    config: dict = {"env_name": "grid", "algo": algo, "run_idx": run}
    if horizon is not None:
        config["constraint_horizon"] = horizon
    if cap is not None:
        config["env_params"] = {"max_steps": cap}
    return config


@pytest.mark.parametrize("horizon", [200, 100])
def test_the_constraint_is_judged_exactly_at_the_configs_horizon(horizon: int) -> None:
    """With horizons [1, 10, 50, 100, 200] evaluated, constraint_horizon 200 is judged at 200
    and 100 at 100: never at another evaluated horizon."""
    configs = [horizon_config("ippo", 0, horizon), horizon_config("shield", 0, horizon)]
    horizons = constraint_horizons(configs)
    assert horizons == {"grid": horizon}
    assert judged_horizon(horizons, "grid", [1, 10, 50, 100, 200]) == horizon


def test_an_evaluation_without_the_constraint_horizon_is_refused() -> None:
    """The old rule took the largest evaluated horizon below the constraint's; now an
    evaluation that lacks H is refused, never judged at a shorter horizon."""
    with pytest.raises(
        ValueError, match=r"env grid: the evaluation lacks the constraint horizon H = 150"
    ):
        judged_horizon({"grid": 150}, "grid", [1, 10, 50, 100, 200])
    with pytest.raises(ValueError, match="env spread: no constraint horizon is known"):
        judged_horizon({"grid": 100}, "spread", [100])


def test_runs_of_one_env_that_disagree_on_the_horizon_are_refused() -> None:
    configs = [
        horizon_config("ippo", 0, 100),
        horizon_config("ippo", 1, 100),
        horizon_config("shield", 0, 200),
    ]
    with pytest.raises(ValueError) as error:
        constraint_horizons(configs)
    assert str(error.value).startswith(
        "env grid: its runs disagree on the constraint horizon: 100 (grid/ippo/run0, "
        "grid/ippo/run1); 200 (grid/shield/run0)"
    )


def test_a_config_without_the_key_falls_back_to_the_episode_cap() -> None:
    assert run_constraint_horizon(horizon_config("ippo", 0, None, cap=80)) == 80
    assert run_constraint_horizon(horizon_config("ippo", 0, 60, cap=80)) == 60
    with pytest.raises(ValueError, match=r"^run grid/ippo/run3: its config sets neither"):
        run_constraint_horizon(horizon_config("ippo", 3, None, cap=None))


def test_pooled_rate_is_clopper_pearson_of_the_sums() -> None:
    estimate, low, high = pooled_rate([40, 0, 7], [200, 50, 0], confidence=0.9)
    expected = clopper_pearson_interval(k=[40, 0], n=[200, 50], confidence=0.9)
    np.testing.assert_allclose(estimate[:2], [0.2, 0.0])
    np.testing.assert_allclose(low[:2], expected[0])
    np.testing.assert_allclose(high[:2], expected[1])
    assert np.isnan([estimate[2], low[2], high[2]]).all()  # no episode, no estimate
    with pytest.raises(ValueError, match="one shape"):
        pooled_rate([1, 2], [3], confidence=0.9)


def test_pooled_violations_sum_runs_and_keep_groups_apart() -> None:
    rows = [
        {"algo": "a", "run": 0, "horizon": 10, "violations": 1, "n": 10, "confidence": 0.95},
        {"algo": "a", "run": 1, "horizon": 10, "violations": 3, "n": 30, "confidence": 0.95},
        {"algo": "b", "run": 0, "horizon": 10, "violations": 5, "n": 10, "confidence": 0.9},
    ]
    pooled = pooled_violations(pd.DataFrame(rows), by=["algo", "horizon"])
    assert pooled[["algo", "violations", "n", "runs"]].values.tolist() == [
        ["a", 4, 40, 2],
        ["b", 5, 10, 1],
    ]
    assert pooled["p_violation"].tolist() == [0.1, 0.5]
    high_b = float(clopper_pearson_interval(k=5, n=10, confidence=0.9)[1])
    assert pooled.loc[1, "ci_high"] == pytest.approx(high_b)  # each group at its confidence
    assert pooled_violations(pd.DataFrame(), by=["algo"]).empty


def test_constraint_status_boundaries() -> None:
    assert constraint_status(estimate=0.05, upper=0.1, max_risk=0.1) == "met"
    assert constraint_status(estimate=0.1, upper=0.2, max_risk=0.1) == "point"
    assert constraint_status(estimate=0.11, upper=0.2, max_risk=0.1) == "not met"
    assert constraint_status(estimate=math.nan, upper=math.nan, max_risk=0.1) == ""
    assert constraint_status(estimate=0.0, upper=0.01, max_risk=math.nan) == ""


def run_rows(policy: tuple[str, bool], outcomes: dict[int, list[int]], *, n: int = 10) -> list:
    """Eval rows at horizon 100 of one policy: run -> its violating episodes (of n)."""
    algo, shielded = policy
    return [
        {
            "env": "grid",
            "algo": algo,
            "run": run,
            "shielded": shielded,
            "horizon": 100,
            "n": n,
            "violations": len(episodes),
            "confidence": 0.95,
            "violating_episodes": episodes,
        }
        for run, episodes in outcomes.items()
    ]


def offset_config(algo: str, run: int, offset: int = 1000) -> dict:
    return {
        "env_name": "grid",
        "algo": algo,
        "run_idx": run,
        "constraint_horizon": 100,
        "final_policy_eval_seed_offset": offset,
    }


def test_between_runs_has_each_runs_rate_in_run_order() -> None:
    evaluation = pd.DataFrame(
        run_rows(("ippo", False), {1: [0, 1, 2], 0: [0]}) + run_rows(("lag", False), {0: []})
    )
    frame = between_runs(evaluation, by=["algo", "horizon"]).set_index("algo")
    assert frame.loc["ippo", "run_ids"] == [0, 1]
    assert frame.loc["ippo", "run_rates"] == [0.1, 0.3]
    # Rates 0.1 and 0.3: mean 0.2, sd 0.1414, t(0.975, 1) = 12.706: 0.2 +- 1.2706, clipped.
    assert frame.loc["ippo", ["runs_mean", "runs_low", "runs_high"]].tolist() == pytest.approx(
        [0.2, 0.0, 1.0]
    )
    # One run: the pooled exact interval of 0 of 10, [0, 1 - 0.025 ** (1 / 10)].
    assert frame.loc["lag", "runs_high"] == pytest.approx(1 - 0.025 ** (1 / 10))


def test_mcnemar_pairs_run_r_with_run_r_and_episode_i_with_episode_i() -> None:
    """Run 0: A violates in {0, 1, 2, 3}, B in {3}: b = 3, c = 0; run 1: A in {0, 1, 2, 4, 5},
    B in {}: b = 5. b = 8, c = 0 pooled: p = 2 / 2^8 = 0.0078125. Episode 3 of run 0 (both
    violate) is concordant and does not count."""
    a, b = ("a", False), ("b", False)
    evaluation = pd.DataFrame(
        run_rows(a, {0: [0, 1, 2, 3], 1: [0, 1, 2, 4, 5]}) + run_rows(b, {0: [3], 1: []})
    )
    configs = [offset_config(x, r) for x in ("a", "b") for r in (0, 1)]
    (pair,) = compare_policies(evaluation, configs, {"grid": 100})
    assert (pair.first, pair.second, pair.first_only, pair.second_only) == (a, b, 8, 0)
    assert pair.runs == (0, 1) and pair.left_out == ()
    assert pair.p_value == 0.0078125 and pair.p_adjusted == 0.0078125  # a single pair
    assert pair.safer(0.05) == b


def test_runs_that_cannot_be_paired_are_left_out_with_a_note() -> None:
    """Run 0 pairs (b = 2: A alone in 0 and 1, c = 1: B alone in 5); run 1 has another seed
    offset in B's config, run 2 another N, run 3 exists for A only, run 4 has no per-episode
    outcomes in B: only run 0 is counted, p = 2 P(Bin(3, 1/2) <= 1) = 2 x 4 / 8 = 1."""
    a, b = ("a", False), ("b", False)
    rows = run_rows(a, {0: [0, 1], 1: [0], 3: [0], 4: [0]}) + run_rows(b, {0: [5], 1: [1], 4: [2]})
    rows += run_rows(a, {2: [0]}, n=10) + run_rows(b, {2: [0]}, n=20)
    evaluation = pd.DataFrame(rows)
    evaluation.loc[(evaluation["algo"] == "b") & (evaluation["run"] == 4), "violating_episodes"] = (
        None
    )
    configs = [offset_config("a", r) for r in range(5)]
    configs += [offset_config("b", r, offset=2000 if r == 1 else 1000) for r in range(5)]
    (pair,) = compare_policies(evaluation, configs, {"grid": 100}, label={a: "A", b: "B"})
    assert (pair.first_only, pair.second_only, pair.runs) == (2, 1, (0,))
    assert pair.p_value == 1.0
    assert pair.left_out == (
        "run 1 of A and B: different or unknown evaluation seed offsets",
        "run 2 of A and B: different numbers of episodes (10 and 20)",
        "B has no run 3",
        "run 4 of B: no per-episode outcomes (eval.parquet from before violating_episodes)",
    )


def test_holm_adjusts_over_every_pair_and_the_shield_pairs_with_its_own_base() -> None:
    """Three policies, one run of 20 episodes: (a, b): b = 0, c = 10, p = 2 / 2^10; (a, c):
    0 and 2, p = 0.5; (b, c): 10 and 2, p = 2 x 79 / 4096 = 0.0385742... Holm over the three:
    0.0019531 x 3 = 0.0058594; 0.0385742 x 2 = 0.0771484; 0.5 x 1 -> 0.5."""
    a, b, c = ("shield", True), ("shield", False), ("zeta", False)
    evaluation = pd.DataFrame(
        run_rows(a, {0: []}, n=20)
        + run_rows(b, {0: list(range(10))}, n=20)
        + run_rows(c, {0: [18, 19]}, n=20)
    )
    configs = [offset_config("shield", 0), offset_config("zeta", 0)]
    pairs = compare_policies(evaluation, configs, {"grid": 100})
    assert [(p.first, p.second) for p in pairs] == [(a, b), (a, c), (b, c)]
    assert [p.p_value for p in pairs] == pytest.approx([2 / 1024, 0.5, 2 * 79 / 4096])
    assert [p.p_adjusted for p in pairs] == pytest.approx([6 / 1024, 0.5, 4 * 79 / 4096])
    assert [p.safer(0.05) for p in pairs] == [a, None, None]


def test_the_family_of_certificates_is_bonferroni_over_the_attempts() -> None:
    """Four shield runs, one of which tested nothing: N = 3 attempts at delta = 0.05 from
    the configs, together at least 1 - 3 x 0.05 = 0.85; a joint 0.95 needs 0.05 / 3."""
    rows = [
        {
            "env": "grid",
            "algo": "shield",
            "run": r,
            "certified": r != 1,
            "cert_episodes": e,
            "cert_delta": 0.2,
        }
        for r, e in enumerate([200, 200, 0, 100])
    ]
    configs = [{**offset_config("shield", r), "shield_credible_delta": 0.05} for r in range(4)]
    family = certificate_family(pd.DataFrame(rows), configs)
    runs = ("grid/shield/run0", "grid/shield/run1", "grid/shield/run3")
    assert family == CertificateFamily(runs=runs, deltas=(0.05,) * 3, target=0.05)
    assert family.joint == pytest.approx(0.85)
    text = family.statement()
    assert "all hold together with probability >= 1 - 3 × 0.05 = 0.85 (Bonferroni)" in text
    assert "needs `joint_certificates: true` in the workflow config" in text
    assert "each run then tests at 0.05 / 3 = 0.0167" in text
    # With `joint_certificates` each run tested at 0.05 / 3: together at 0.95.
    shared = [{**c, "algo_params": {"certificate_family": 3}} for c in configs]
    joint = certificate_family(pd.DataFrame(rows), shared)
    assert joint is not None and joint.deltas == pytest.approx((0.05 / 3,) * 3)
    assert joint.joint == pytest.approx(0.95) and joint.target == 0.05
    assert "= 0.95 (Bonferroni: each run tested at 0.05 / 3, `joint_certificates`)." in (
        joint.statement()
    )
    # Twenty attempts at 0.05 promise nothing together.
    many = CertificateFamily(runs=tuple(map(str, range(20))), deltas=(0.05,) * 20)
    assert "= 0 (Bonferroni), which promises nothing jointly" in many.statement()
    assert certificate_family(pd.DataFrame(rows).assign(cert_episodes=0), configs) is None


def test_the_pooled_interval_is_what_agreeing_runs_are_widened_to() -> None:
    """Three runs with 5 of 100 each have no spread: the interval across runs is the pooled
    Clopper-Pearson interval of 15 of 300, Beta quantiles from scipy."""
    evaluation = pd.DataFrame(run_rows(("a", False), {r: list(range(5)) for r in range(3)}, n=100))
    row = between_runs(evaluation, by=["algo"]).iloc[0]
    assert row["runs_mean"] == pytest.approx(0.05)
    assert row["runs_low"] == pytest.approx(beta.ppf(0.025, 15, 286))
    assert row["runs_high"] == pytest.approx(beta.ppf(0.975, 16, 285))
