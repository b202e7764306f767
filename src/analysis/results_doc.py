"""`docs/results.md`: an experiment's figures and summary table, as a newcomer sees them.

`make results` runs the workflow on `config/config.yaml` (nothing reruns if it is up to date)
and then

    python -m src.analysis.results_doc config/config.yaml docs

which copies the experiment's figures (PNG) and the small tables they come from (the summary
CSV and the evaluation Parquet, `TABLES`) into `docs/results/` and writes `docs/results.md`
(`make paper` does the same for `config/paper.yaml` under the name `paper`, `--name paper`):
what was run (read from the run configs stored in the tables, never typed in), the summary
table (`tables/summary.md`), what the run shows per env (the policies' risks at the constraint
horizon with both intervals, and which policy is safer than which only where an exact paired
McNemar test on the shared evaluation layouts says so, Holm-adjusted over every pair on the
page: `src.analysis.constraint.compare_policies`), the certificate of every shield run that
has one (the `cert_*` columns of the evaluation table), worded as the per-run statement its
test makes, with what the certificates say together, and every figure with a description of
what it shows and how to read it. The descriptions are generic, so the page stays right
whatever the numbers are. A figure the experiment has no data for is not drawn
(`src.analysis.figures.figure_plan`: no run logs a Lagrange multiplier, ...); the page names
it and the reason in one line, and a figure that has data but whose file is missing is an
error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from src.algos.metrics import (
    LAMBDA,
    SHIELD_AUC_TEAM,
    SHIELD_INTERVENTIONS,
    SHIELD_SECONDS,
)
from src.algos.registry import get_algorithm
from src.algos.shield.calibration import fixed_sequence_test
from src.analysis.aggregate import load_table
from src.analysis.constraint import (
    CERTIFICATE_STATEMENT,
    MET,
    POINT,
    Comparison,
    certificate_family,
    compare_policies,
    constraint_horizons,
    run_configs,
)
from src.analysis.figures import FIGURE_NAMES, plan_of_tables
from src.analysis.files import write_text
from src.analysis.style import policy_label
from src.analysis.tables import BEYOND, NO_FLOOR
from src.config.lagrange import LagrangeConfig
from src.config.run import RunConfig
from src.containment import ContainmentError, archive_limit, copy_file, open_regular
from src.core.io import atomic_output

__all__ = [
    "FIGURE_GUIDE",
    "RESULTS_FOLDER",
    "certificate_lines",
    "comparison_sentence",
    "experiment_dir",
    "main",
    "md_code",
    "md_escape",
    "shield_comparison",
    "write_results_doc",
]

RESULTS_FOLDER = "results"
"""The default page name: `results.md`, and the folder next to it holding the copied figures
and tables."""
TABLES = ("summary.csv", "eval.parquet")
"""The experiment's tables copied next to the figures, so that a reader can check the page's
numbers."""

# Figure name -> (heading, what it shows and how to read it).
FIGURE_GUIDE: dict[str, tuple[str, str]] = {
    "learning_curves": (
        "Training curves",
        "One column per env, one colour per algorithm. Rows: team return per training "
        "episode, episode cost (summed over agents), and the fraction of episodes with a "
        "violation. Episodes are grouped in bins of env steps, each holding episodes of every "
        "run, so the curves have no gaps. Return and cost are the mean across runs with a 95% "
        "t-interval band (none with a single run); the violation rate is pooled over the runs "
        "(violating episodes over episodes in the bin) with a 95% Clopper-Pearson band; faint "
        "dots are single runs; the dotted black line is `max_risk`. A method that learns to be "
        "safe brings its violation rate down towards the dotted line while its return rises; "
        "wide bands mean the runs disagree.",
    ),
    "violation_vs_horizon": (
        "Violation probability against horizon",
        "For each final policy, the probability that some agent violates the constraint within "
        "the first H steps of an episode, for every evaluated horizon H (log axis). Each point "
        "pools the runs' evaluation episodes (violations and episodes summed) and the band is "
        "its Clopper-Pearson interval; dots are single runs. Dashed curves are shielded "
        "policies evaluated with their shield off (the base policy): the distance between a "
        "solid curve and its dashed twin is what the shield contributes. The curves can only "
        "rise with H; compare them at the constraint horizon (the dashed grey vertical line: "
        "the steps the constraint covers) with the dotted `max_risk` line; to the right of it "
        "they are beyond the constraint.",
    ),
    "return_vs_risk": (
        "Return against risk",
        "Each final policy at the constraint horizon H (its runs' `constraint_horizon`): "
        "horizontally the mean of its runs' probabilities of a violation within H steps with "
        "the between-run interval (thin bar with caps: runs as the unit, widened to contain "
        "the pooled interval) and, thick and faint, the pooled Clopper-Pearson interval of "
        "these runs' policies; vertically its mean team return over those steps with the 95% "
        "t-interval across runs (none with a single run); small markers are single runs, "
        "squares shielded policies with the shield off. Up and to the left is better. A policy "
        "meets the constraint (`met` in the summary table) when its thin bar lies left of the "
        "dotted `max_risk` line.",
    ),
    "shield_interventions": (
        "Shield interventions during training",
        "For the algorithms that log it, the number of agent-steps per policy update whose "
        "proposed action the shield replaced: mean across runs with a 95% t-interval band, "
        "thin lines for single runs. The shield arms after `shield_patience` updates, so the "
        "curve starts at zero; a falling curve afterwards means the policy learned to propose "
        "actions that the shield lets through.",
    ),
    "lagrange_multiplier": (
        "Lagrange multiplier during training",
        "For the algorithms that log one, the Lagrange multiplier lambda at each policy "
        "update: mean across runs with a 95% t-interval band, thin lines for single runs. "
        "lambda grows while the measured episode risk exceeds `max_risk` and shrinks when it "
        "is below, so a lambda that keeps rising means the constraint was still violated "
        "during training, and one that levels off below its cap `lambda_max` means the "
        "policy reached it; one pinned at the cap was still violating with the largest "
        "penalty allowed.",
    ),
}


_MD_SPECIAL = re.compile(r"([\\`|<>\[\]*_&])")


def md_escape(value: Any) -> str:
    r"""`value` as plain Markdown text: backslash, backtick, `|`, `<`, `>`, `[`, `]`, `*`,
    `_` and `&` escaped, line breaks made spaces. For every value the page did not compute
    (names and settings read from a run folder, which may come from anyone), so that none
    becomes HTML, a link, an image, a table cell or emphasis.

    >>> md_escape("<img src=x onerror=alert(1)> [a](b) | *c*")
    '\\<img src=x onerror=alert(1)\\> \\[a\\](b) \\| \\*c\\*'
    """
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).splitlines()))


def md_code(value: Any) -> str:
    """`value` as a Markdown code span: nothing inside one is markup, so only backticks
    (which would end it; written as `'`) and line breaks (spaces) are replaced.

    >>> md_code("hazard_grid<b>")
    '`hazard_grid<b>`'
    """
    text = " ".join(str(value).splitlines()).replace("`", "'")
    return f"`{text}`"


def _page_markdown(text: str) -> str:
    r"""Markdown the pipeline wrote into a results folder (`tables/summary.md`), included in
    the page as it is except for what could make HTML, an autolink, a link or an image:
    `<` before a letter, `/`, `!` or `?` (written `&lt;`) and `]` before `(`, `[` or `:`
    (escaped). The table's own markup and text such as `<=` or `[0.1, 0.2]` stay.

    >>> _page_markdown("| <script> | [x](http://e) | <= 0.1 [0.0, 0.2] |")
    '| &lt;script> | [x\\](http://e) | <= 0.1 [0.0, 0.2] |'
    """
    text = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", text)
    return re.sub(r"\](?=[(\[:])", r"\\]", text)


def _read_limit() -> int:
    """The most bytes the page reads from one file of the results folder."""
    return archive_limit()[0]


def _read_text(source: Path, relative: str | Path) -> str:
    """A text file of the results folder: a regular file inside it, within `_read_limit`."""
    with open_regular(source, relative, limit=_read_limit()) as handle:
        return handle.read().decode("utf-8")


def _read_csv(source: Path, relative: str | Path) -> pd.DataFrame:
    """A CSV file of the results folder: a regular file inside it, within `_read_limit`."""
    with open_regular(source, relative, limit=_read_limit()) as handle:
        return pd.read_csv(handle)


def _table(source: Path, name: str) -> Any:
    """An aggregated table (`tables/{name}.parquet`) of the results folder, read from a
    regular file inside it, within `_read_limit` (`src.analysis.aggregate.load_table`)."""
    return load_table(source / "tables", name, root=source, limit=_read_limit())


def experiment_dir(config_file: str | Path) -> Path:
    """`{results_dir}/{experiment_tag}` of a workflow config file."""
    config = yaml.safe_load(Path(config_file).read_text(encoding="utf-8"))
    if not isinstance(config, dict) or not {"results_dir", "experiment_tag"} <= set(config):
        raise ValueError(f"{config_file} must set results_dir and experiment_tag")
    return Path(config["results_dir"]) / str(config["experiment_tag"])


def _values(configs: Sequence[dict], key: str) -> str:
    """The distinct values of a config key over the runs, as text."""
    values = sorted({str(config.get(key)) for config in configs})
    return ", ".join(md_escape(value) for value in values)


def _setup(configs: Sequence[dict], tag: str) -> list[str]:
    """What was run, from the run configs."""
    if not configs:
        return ["The tables carry no run configs, so the setup cannot be listed."]
    pairs = sorted({(c["env_name"], c["algo"], int(c["run_idx"])) for c in configs})
    envs = sorted({env for env, _, _ in pairs})
    algos = sorted({algo for _, algo, _ in pairs})
    runs = {(env, algo): 0 for env, algo, _ in pairs}
    for env, algo, _ in pairs:
        runs[(env, algo)] += 1
    counts = sorted(set(runs.values()))
    commits = sorted(
        {
            f"{md_escape(c.get('git_commit', '?'))}{' (dirty)' if c.get('git_dirty') else ''}"
            for c in configs
        }
    )
    return [
        f"- experiment {md_code(tag)}: envs {', '.join(md_code(e) for e in envs)}; algorithms "
        f"{', '.join(md_code(a) for a in algos)}; {' or '.join(map(str, counts))} run(s) per "
        "env and algorithm (seed = `seed_offset` + run index)",
        f"- env steps per run: {_values(configs, 'timesteps')}; agents per env: "
        + ", ".join(
            f"{md_code(e)} {_values([c for c in configs if c['env_name'] == e], 'n_agents')}"
            for e in envs
        ),
        f"- constraint: P(violation within H steps of an episode) <= `max_risk` = "
        f"{_values(configs, 'max_risk')}, H the constraint horizon: "
        + ", ".join(f"{md_code(e)} {md_escape(h)}" for e, h in constraint_horizons(configs).items())
        + " (each run's `constraint_horizon`: the task's episode cap `max_steps` unless the "
        "config sets it)",
        f"- evaluation: {_values(configs, 'final_policy_eval_episodes')} episodes per final "
        f"policy at horizons {_values(configs, 'final_policy_eval_horizons')}, intervals at "
        f"confidence {_values(configs, 'final_policy_eval_confidence')}",
        f"- code: commit {', '.join(commits)}",
        _code_path_line(configs),
    ]


def _token(value: Any) -> str:
    """A recorded kernel setting as page text: letters, digits, `_` and `,` only (a run folder
    may come from anyone: anything else reads `unrecognised`, never Markdown or HTML)."""
    text = str(value)
    return text if re.fullmatch(r"[A-Za-z0-9_,]{1,64}", text) else "unrecognised"


def _code_path_line(configs: Sequence[dict]) -> str:
    """The floating-point code path the runs trained on (`src.numerics.kernels`, recorded in
    each run's config.json): its fingerprint and settings, one entry per distinct path."""
    paths = set()
    for config in configs:
        kernels = config.get("kernels") if isinstance(config.get("kernels"), dict) else {}
        settings = ", ".join(
            f"{name}={_token(kernels.get(name))}"
            for name in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "openblas_core")
        )
        paths.add(f"`{_token(kernels.get('fingerprint', 'unrecorded'))}` ({settings})")
    text = "; ".join(sorted(paths))
    mixed = (
        " (the runs differ: their numbers need not reproduce together)" if len(paths) > 1 else ""
    )
    return (
        f"- code path: {text}{mixed}; a machine reproduces these numbers bit for bit when "
        "`python -m tests.reliability.fingerprints` prints this fingerprint (docs/design.md, "
        "section 8)"
    )


def _lambda_line(env: str, updates: pd.DataFrame, configs: Sequence[dict]) -> str | None:
    """Where the runs' Lagrange multipliers ended, against their cap `lambda_max`."""
    rows = updates[(updates["env"] == env) & updates[LAMBDA].notna()] if LAMBDA in updates else []
    if len(rows) == 0:
        return None
    caps = {float(c.get("lambda_max", LagrangeConfig.lambda_max)) for c in configs}
    last = rows.sort_values("update").groupby(["algo", "run"])[LAMBDA].last()
    text = f"lambda ends at {last.mean():.2f} (mean of {len(last)} runs)"
    if len(caps) == 1 and np.allclose(last.to_numpy(), caps.pop()):
        text += (
            ", its cap `lambda_max`: the constraint was still violated with the strongest "
            "penalty allowed, and lambda is flat only because it is clamped"
        )
    return text


def return_ratio(value: float, reference: float) -> str:
    """A return against ippo's: their ratio ("0.95x") when both are positive, else their
    difference ("-24.8"), since a ratio of negative returns reads twice as bad as twice as
    good."""
    if reference > 0 and value > 0:
        return f"{value / reference:.2f}x"
    return f"{value - reference:+.1f}"


def _returns_against_ippo(others: Sequence[tuple[str, float]], reference: float) -> str:
    """The observations' sentence on each policy's evaluation return against ippo's."""
    if reference > 0 and all(value > 0 for _, value in others):
        ratios = ", ".join(f"{policy} {value / reference:.2f}x" for policy, value in others)
        return f"Evaluation return relative to ippo's: {ratios}."
    differences = ", ".join(f"{policy} {value - reference:+.1f}" for policy, value in others)
    return (
        f"Evaluation return minus ippo's ({reference:.1f}): {differences} (returns that are not "
        "all positive are compared by their difference, not their ratio)."
    )


def _returns_across_runs(rows: pd.DataFrame) -> str:
    """The observations' sentence on the evaluation returns as runs vary: each policy's mean
    across runs with its t-interval (the summary's), so that the ratios above read with their
    uncertainty."""
    parts = []
    for _, row in rows.iterrows():
        low, high = row["eval_return_low"], row["eval_return_high"]
        spread = "" if pd.isna(low) else f" [{low:.3g}, {high:.3g}]"
        parts.append(f"{md_escape(row.policy)} {row['eval_return_mean']:.3g}{spread}")
    return (
        "Evaluation returns across runs (mean [95% t-interval over the runs]; where two "
        "intervals overlap, the ratio above is within what runs vary by): " + ", ".join(parts) + "."
    )


def _change(first: float, last: float) -> str:
    """'fall from A to B', 'rise from A to B' or 'stay at A', as the rounded counts say."""
    a, b = f"{first:,.0f}", f"{last:,.0f}"
    if a == b:
        return f"stay at {a} (first three armed updates and last three)"
    verb = "fall" if last < first else "rise"
    return f"{verb} from {a} (first three armed updates) to {b} (last three)"


def _shield_line(env: str, history: pd.DataFrame, updates: pd.DataFrame, configs: list) -> str:
    """Training violation rates after the shield arms (every algorithm, same window) and the
    shield's interventions over its armed updates."""
    shielded = [c for c in configs if get_algorithm(c["algo"]).shielded]
    if not shielded:
        return ""
    config = shielded[0]
    armed_at = int(config["shield_patience"]) * int(config["num_envs"]) * int(config["rollouts"])
    episodes = history[(history["env"] == env) & (history["t_start"] >= armed_at)]
    if episodes.empty:
        return (
            f"no training episode starts after env step {armed_at:,}, where the shield would "
            f"arm (`shield_patience` = {int(config['shield_patience'])} updates): the shield never "
            "armed, so its runs trained and were evaluated as ippo with a watching shield"
        )
    rates = episodes.groupby("algo")["violated"].agg(["mean", "size"])
    text = (
        f"training episodes that start after env step {armed_at:,} (where the shield arms) "
        "violating: "
        + ", ".join(
            f"{md_escape(algo)} {row['mean']:.3f} of {int(row['size']):,}"
            for algo, row in rates.iterrows()
        )
    )
    for algo in sorted({c["algo"] for c in shielded}):
        rows = updates[(updates["env"] == env) & (updates["algo"] == algo)]
        armed = rows[rows["global_step"] > armed_at].sort_values("update")
        per_update = armed.groupby("update")[SHIELD_INTERVENTIONS].mean()
        if len(per_update):
            change = _change(per_update.iloc[:3].mean(), per_update.iloc[-3:].mean())
            text += f"; {md_code(algo)} interventions per update {change}"
    return text


def _p_text(p: float) -> str:
    """A p-value on the page: three significant digits, `< 0.001` below that."""
    return "< 0.001" if p < 0.001 else f"= {p:.3g}"


def comparison_sentence(
    comparison: Comparison, *, alpha: float, names: Mapping[tuple[str, bool], str]
) -> str:
    """The page's sentence on a pair of policies: "A is safer than B" only when the
    Holm-adjusted exact McNemar p is <= `alpha`, else that they do not differ detectably;
    `names` maps each policy (algo, shielded) to its label.

    >>> from src.analysis.constraint import Comparison
    >>> pair = Comparison(env="e", first=("a", False), second=("b", False), horizon=100,
    ...                   first_only=1, second_only=8, runs=(0,), left_out=(),
    ...                   p_value=0.0390625, p_adjusted=0.0390625)
    >>> comparison_sentence(pair, alpha=0.05, names={("a", False): "a", ("b", False): "b"})
    'a is safer than b (McNemar p = 0.0391, Holm-adjusted; ...: a 1, b 8)'
    """
    first, second = names[comparison.first], names[comparison.second]
    if not comparison.runs:
        return f"{first} and {second}: no run could be paired, so they are not compared"
    counts = {first: comparison.first_only, second: comparison.second_only}
    safer = comparison.safer(alpha)
    if safer is not None:
        winner, loser = (first, second) if safer == comparison.first else (second, first)
        return (
            f"{winner} is safer than {loser} (McNemar p {_p_text(comparison.p_adjusted)}, "
            f"Holm-adjusted; episodes where only one violated: {winner} {counts[winner]}, "
            f"{loser} {counts[loser]})"
        )
    return (
        f"{first} and {second} do not differ detectably (p {_p_text(comparison.p_adjusted)}, "
        f"Holm-adjusted; episodes where only one violated: {first} {counts[first]}, "
        f"{second} {counts[second]})"
    )


def _comparison_intro(comparisons: Sequence[Comparison], alpha: float) -> str:
    """How the page compares policies: the paired design, the test and the family."""
    tested = sum(1 for c in comparisons if c.runs)
    return (
        "Which policy is safer is said only where a paired test shows it. Every algorithm is "
        "evaluated on the same reset seeds (run r's episode i has the seed "
        "`final_policy_eval_seed_offset` + r N + i), so run r of one policy is paired with run "
        "r of another, episode by episode, at the env's constraint horizon: b counts the "
        "episodes in which only the first violated, c those in which only the second did, "
        "summed over the runs both have, and the exact McNemar test gives "
        "p = min(1, 2 P(Bin(b + c, 1/2) <= min(b, c))). Every pair of an env's policies is "
        f"compared ({tested} pairs on this page, each policy against every other, so that no "
        "comparison is chosen after seeing the numbers), and the p-values are Holm-adjusted "
        "over all of them: a pair is said to differ only when its adjusted p is <= "
        f"{alpha:g} (1 - the evaluation's confidence). The estimates per policy are listed in "
        "the summary's order, not ranked."
    )


def _risk_listing(rows: pd.DataFrame, horizon: int) -> str:
    """Each policy's pooled risk and its risk across runs at `horizon`, in the summary's order."""
    column = f"p_violation_h{horizon}"
    parts = []
    for _, r in rows.iterrows():
        text = (
            f"{md_escape(r.policy)} {r[column]:.3f} "
            f"[{r[column + '_low']:.3f}, {r[column + '_high']:.3f}]"
        )
        rates = json.loads(r["run_p_violation"]) if isinstance(r["run_p_violation"], str) else []
        if len(rates) > 1:
            runs = column + "_runs"
            text += (
                f", across runs {r[runs]:.3f} [{r[runs + '_low']:.3f}, {r[runs + '_high']:.3f}] "
                f"(runs: {', '.join(f'{x:.3f}' for x in rates)})"
            )
        else:
            text += " (one run: the pooled interval only)"
        parts.append(text)
    return "; ".join(parts)


def _verdict_sentence(rows: pd.DataFrame, max_risk: float) -> str:
    """Which policies meet `max_risk`, on the interval across runs or its mean only."""
    met = [md_escape(r.policy) for _, r in rows.iterrows() if r["constraint"] == MET]
    point = [md_escape(r.policy) for _, r in rows.iterrows() if r["constraint"] == POINT]
    only = f"by the mean of the runs' rates only (point): {', '.join(point)}"
    if met:
        return (
            f"`max_risk` = {max_risk} is met (the upper end of the interval across runs "
            f"<= `max_risk`) by {', '.join(met)}" + (f"; {only}." if point else ".")
        )
    if point:
        return f"No policy meets `max_risk` = {max_risk} with its interval across runs; {only}."
    return f"No policy meets `max_risk` = {max_risk}."


def _observations(
    source: Path,
    configs: list[dict],
    comparisons: Sequence[Comparison],
    *,
    alpha: float,
) -> list[str]:
    """What the run shows, per env: the policies' risks (listed, not ranked), the paired
    comparisons, returns, lambda, shield."""
    summary = _read_csv(source, "tables/summary.csv")
    history = _table(source, "history").to_pandas()
    updates = _table(source, "updates").to_pandas()
    lines = [_comparison_intro(comparisons, alpha), ""] if comparisons else []
    for env, rows in summary.groupby("env", sort=True):
        horizon = int(rows["constraint_horizon"].iloc[0])
        max_risk = float(rows["max_risk"].iloc[0])
        reference = rows.loc[rows["policy"] == "ippo", "eval_return_mean"]
        lines.append(
            f"- {md_code(env)}: P(violation within {horizon} steps) per policy, pooled over its "
            "runs [Clopper-Pearson interval] and across runs (mean of the runs' rates [between-run "
            f"interval]): {_risk_listing(rows, horizon)}. {_verdict_sentence(rows, max_risk)}"
        )
        beyond = sorted(
            int(c.removeprefix("p_violation_h"))
            for c in rows.columns
            if c.startswith("p_violation_h")
            and c.removeprefix("p_violation_h").isdigit()
            and int(c.removeprefix("p_violation_h")) > horizon
        )
        if beyond:
            lines.append(
                f"  Evaluated horizons beyond the constraint horizon {horizon} "
                f"({', '.join(map(str, beyond))}) are beyond the constraint: the summary table "
                f"shows them (marked {BEYOND}) for what the policies do after the steps the "
                "constraint covers; no verdict or comparison is taken there."
            )
        mine = [c for c in comparisons if c.env == env]
        if mine:
            names = {
                policy: md_escape(policy_label(*policy))
                for c in mine
                for policy in (c.first, c.second)
            }
            lines.append(
                f"  Paired comparisons at H = {horizon} (exact McNemar test, Holm-adjusted over "
                "the pairs on this page):"
            )
            lines += [f"  - {comparison_sentence(c, alpha=alpha, names=names)}." for c in mine]
            left_out = list(dict.fromkeys(note for c in mine for note in c.left_out))
            if left_out:
                lines.append(f"  Left out of the pairing: {'; '.join(left_out)}.")
        if "floor" in rows and not pd.isna(rows["floor"].iloc[0]):
            first = rows.iloc[0]
            verdict = "well posed" if bool(first["feasible"]) else "not well posed"
            lines.append(
                f"  Risk floor (careful centralised team on the same layouts): "
                f"{first['floor']:.3f} (upper bound {first['floor_upper']:.4f}) against "
                f"`max_risk` / 4 = {max_risk / 4:g}: the task is {verdict}."
            )
        elif "floor" in rows:
            lines.append(
                f"  Risk floor: {NO_FLOOR}, so whether `max_risk` = {max_risk} can be met on "
                "this task is not known from the floor."
            )
        if "collision_share" in rows:
            shares = ", ".join(
                f"{md_escape(r.policy)} {r['collision_share']:.0%}"
                for _, r in rows.iterrows()
                if not pd.isna(r["collision_share"])
            )
            if shares:
                lines.append(
                    f"  Share of violating episodes that began with a collision: {shares}."
                )
        if len(reference):
            others = [(r.policy, r["eval_return_mean"]) for _, r in rows.iterrows()]
            others = [(md_escape(policy), value) for policy, value in others if policy != "ippo"]
            lines.append("  " + _returns_against_ippo(others, float(reference.iloc[0])))
            lines.append("  " + _returns_across_runs(rows))
        env_configs = [c for c in configs if c["env_name"] == env]
        for extra in (
            _lambda_line(env, updates, env_configs),
            _shield_line(env, history, updates, env_configs),
        ):
            if extra:
                lines.append(f"  {extra[0].upper()}{extra[1:]}.")
    return lines


def _coordination(config: Mapping[str, Any]) -> str:
    """Who decides in a shielded run, as the run recorded its shield section
    (`RunConfig.from_recorded`): the value the run resolved, whether the algorithm fixes it,
    its algo_params set it or it is the section's default ("–" for a run without one)."""
    shield = RunConfig.from_recorded(config).shield
    return "–" if shield is None else shield.coordination


def _auc(mine: pd.DataFrame) -> str:
    """The mean over the runs of the critic's AUC at the last update that has one ("–" where
    none was computed)."""
    if SHIELD_AUC_TEAM not in mine:
        return "–"
    per_run = mine.dropna(subset=[SHIELD_AUC_TEAM]).sort_values("update").groupby("run")
    last = per_run[SHIELD_AUC_TEAM].last()
    return f"{last.mean():.2f}" if len(last) else "–"


def _cpu_seconds(source: Path, env: str, algo: str, runs: Sequence[int], stage: str) -> float:
    """Mean CPU seconds of the runs' `stage` job (the Snakemake benchmark file in each run's
    logs; NaN when none is there). Only regular files inside `source` are read."""
    values = []
    for run in runs:
        relative = Path("runs") / env / algo / f"run{run}" / "logs" / f"{stage}.benchmark.tsv"
        try:
            with open_regular(source, relative, limit=_read_limit()) as handle:
                table = pd.read_csv(handle, sep="\t")
        except FileNotFoundError:
            continue
        if "cpu_time" in table and len(table):
            values.append(float(table["cpu_time"].iloc[-1]))
    return float(np.mean(values)) if values else float("nan")


def shield_comparison(source: Path, configs: Sequence[dict]) -> list[str]:
    """A table of every shielded algorithm's risk, return and cost, per env (empty with fewer
    than two shielded algorithms)."""
    shielded = sorted({c["algo"] for c in configs if get_algorithm(c["algo"]).shielded})
    if len(shielded) < 2:
        return []
    summary = _read_csv(source, "tables/summary.csv")
    updates = _table(source, "updates").to_pandas()
    rows = [
        "| env | algorithm | coordination | critic AUC | P(viol. ≤ H) | return (eval) "
        "| vs ippo | certified | train CPU s | filter s | evaluate CPU s |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for env, group in summary.groupby("env", sort=True):
        horizon = int(group["constraint_horizon"].iloc[0])
        column = f"p_violation_h{horizon}"
        reference = group.loc[group["policy"] == "ippo", "eval_return_mean"]
        for algo in shielded:
            row = group[group["policy"] == algo]
            runs = sorted(
                int(c["run_idx"]) for c in configs if c["env_name"] == env and c["algo"] == algo
            )
            if row.empty or not runs:
                continue
            r = row.iloc[0]
            config = next(c for c in configs if c["env_name"] == env and c["algo"] == algo)
            ratio = (
                return_ratio(r["eval_return_mean"], float(reference.iloc[0]))
                if len(reference)
                else "–"
            )
            mine = updates[(updates["env"] == env) & (updates["algo"] == algo)]
            filter_seconds = mine.groupby("run")[SHIELD_SECONDS].sum().mean()
            cpu = [_cpu_seconds(source, env, algo, runs, stage) for stage in ("train", "evaluate")]
            cells = [f"{v:.0f}" if np.isfinite(v) else "–" for v in (*cpu, filter_seconds)]
            rows.append(
                f"| {md_escape(env)} | {md_escape(algo)} | {md_escape(_coordination(config))} "
                f"| {_auc(mine)} "
                f"| {r[column]:.3f} "
                f"[{r[column + '_low']:.3f}, {r[column + '_high']:.3f}] "
                f"| {r['eval_return_mean']:.1f} | {ratio} | {md_escape(r['certificate'])} "
                f"| {cells[0]} | {cells[2]} | {cells[1]} |"
            )
    return rows


def _certificate_line(run: pd.Series, max_risk: float | None, horizon: int | None) -> str:
    """One run's certificate in words; `horizon`: its env's constraint horizon (None: unknown)."""
    text = _certificate_outcome(run, max_risk)
    tested = int(run["cert_horizon"])
    if horizon is not None and int(run["cert_episodes"]) > 0 and tested != horizon:
        text += (
            f"; its calibration episodes covered {tested} steps, not the constraint horizon "
            f"{horizon}, so it says nothing about the constraint"
        )
    return text


def _certificate_outcome(run: pd.Series, max_risk: float | None) -> str:
    """One run's certificate test and its outcome in words."""
    bound = "`max_risk`" if max_risk is None else f"`max_risk` = {max_risk:g}"
    horizon, delta = int(run["cert_horizon"]), float(run["cert_delta"])
    allowance = f"{float(run['cert_allowance']):.4g}"
    if int(run["cert_episodes"]) == 0:
        return (
            "no certificate (not tested: the shield ran no calibration episodes); it deploys "
            f"the allowance {allowance} that training ended with"
        )
    tally = (
        f"{int(run['cert_violations'])} of {int(run['cert_episodes'])} calibration episodes "
        f"violated within {horizon} steps"
    )
    p_value = float(run["cert_p_value"])
    if bool(run["certified"]):
        return (
            f"certified: with the deployed allowance {allowance}, {tally} (p = {p_value:.3g} "
            f"<= delta = {delta:g}), so the test certified P(violation within {horizon} steps) "
            f"<= {bound} for this run, in the per-run sense stated above"
        )
    episodes, violations = int(run["cert_episodes"]), int(run["cert_violations"])
    text = (
        f"no certificate: with the most cautious allowance {allowance}, {tally} (p = "
        f"{p_value:.3g} > delta = {delta:g}); the shield deploys that allowance without a "
        f"guarantee of {bound}"
    )
    if max_risk is None:
        return text
    passing = passing_violations(episodes, max_risk=max_risk, delta=delta)
    share = f"{violations / episodes:.3f} ({violations / episodes / max_risk:.2f} x `max_risk`)"
    if passing < 0:
        return f"{text}: on {episodes} episodes no count of violations passes the test"
    return (
        f"{text}: on {episodes} episodes a rung passes with at most {passing} violating "
        f"({passing / episodes:.3f}, {passing / episodes / max_risk:.2f} x `max_risk`), and "
        f"its most cautious rung violated in {share} of them"
    )


def passing_violations(episodes: int, *, max_risk: float, delta: float) -> int:
    """The most violating episodes of `episodes` with which an allowance passes the
    certificate's test (`fixed_sequence_test`, both looks: as many of the violations as fit in
    the first half, where the first look refuses all but a few), or -1 when none does."""

    def certified(k: int) -> bool:
        early = min(k, episodes // 2)

        def outcomes(_: float, first: int, stop: int) -> tuple[int, float]:
            if first > 0:
                return k - early, 0.0
            return (early if stop < episodes else k), 0.0

        test = fixed_sequence_test(
            [1.0],
            outcomes,
            episodes=episodes,
            max_risk=max_risk,
            delta=delta,
            horizon=1,
            first_seed=0,
        )
        return test.certified

    low, high = -1, episodes  # certified(low) holds (or low = -1); certified(high + 1) fails
    while low < high:
        middle = (low + high + 1) // 2
        if certified(middle):
            low = middle
        else:
            high = middle - 1
    return low


def certificate_lines(evaluation: pd.DataFrame, configs: Sequence[dict]) -> list[str]:
    """One line per env and shield run with a certificate (the evaluation's `certified` and
    `cert_*` columns): certified or not, the deployed allowance, the calibration episodes'
    violations, the p-value and delta, in words (and when the calibration episodes covered
    another horizon than the env's constraint horizon, that it says nothing about the
    constraint). Empty when no run has a certificate."""
    if "certified" not in evaluation.columns:
        return []
    rows = evaluation[evaluation["certified"].notna()]
    risks = {
        (c["env_name"], c["algo"], int(c["run_idx"])): float(c["max_risk"])
        for c in configs
        if "max_risk" in c
    }
    horizons = constraint_horizons(configs)
    lines = []
    for (env, algo, run), group in rows.groupby(["env", "algo", "run"], sort=True):
        risk = risks.get((env, algo, int(run)))
        text = _certificate_line(group.iloc[0], risk, horizons.get(str(env)))
        lines.append(f"- {md_code(env)}, {md_code(algo)} run {md_escape(run)}: {text}.")
    return lines


def _not_drawn_line(plan: Mapping[str, str | None]) -> str:
    """The page's one line on the figures not drawn and why ('' when every figure is drawn)."""
    absent = [f"*{FIGURE_GUIDE[name][0]}* ({why})" for name, why in plan.items() if why]
    if not absent:
        return ""
    return "Not drawn, for want of data: " + "; ".join(absent) + "."


def write_results_doc(
    experiment: str | Path,
    docs_dir: str | Path,
    *,
    config_file: str = "config/config.yaml",
    name: str = RESULTS_FOLDER,
) -> Path:
    """Copy the figures and `TABLES` of `experiment` into `docs_dir/{name}/` and write
    `docs_dir/{name}.md` (`name`: the page, e.g. `results` or `paper`, and its `make` target).

    `experiment` is a finished experiment folder (`tables/summary.md`, the aggregated tables
    and `figures/{name}.png` for every name of `FIGURE_NAMES` that its tables have data for,
    `src.analysis.figures.figure_plan`; a missing one is a `FileNotFoundError`). Figures in
    `docs_dir/results/` that are no longer produced are removed. `config_file` is the workflow
    config the page names as the experiment's source. Returns the path of the page.
    """
    source = Path(experiment)
    summary = source / "tables" / "summary.md"
    if not summary.is_file():
        raise FileNotFoundError(f"{summary} is missing: run the workflow first (make run)")
    plan = plan_of_tables(source / "tables", root=source, limit=_read_limit())
    drawn = [name for name in FIGURE_NAMES if plan[name] is None]
    missing = [n for n in drawn if not (source / "figures" / f"{n}.png").is_file()]
    if missing:
        raise FileNotFoundError(
            f"{source / 'figures'} lacks the figures {missing}, which its tables have data for"
        )
    unexplained = sorted(set(FIGURE_NAMES) - set(FIGURE_GUIDE))
    if unexplained:
        raise ValueError(f"no description in FIGURE_GUIDE for the figures {unexplained}")
    configs = run_configs(_table(source, "history"))
    evaluation = _table(source, "eval").to_pandas()
    comparisons: list[Comparison] = []
    alpha = 0.05
    if len(evaluation):
        names = {
            (str(a), bool(sh)): md_escape(policy_label(str(a), bool(sh)))
            for a, sh in evaluation[["algo", "shielded"]].drop_duplicates().itertuples(index=False)
        }
        comparisons = compare_policies(
            evaluation, configs, constraint_horizons(configs), label=names
        )
        # The level of the comparisons: 1 - the evaluation's confidence (rounded: 1 - 0.95 is
        # 0.05 plus a rounding error in binary).
        alpha = round(1.0 - float(evaluation["confidence"].min()), 12)

    docs = Path(docs_dir)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"page name {name!r}: expected lower-case letters, digits and _")
    folder = docs / name
    folder.mkdir(parents=True, exist_ok=True)
    copies = [Path("figures") / f"{figure}.png" for figure in drawn]
    copies += [Path("tables") / table for table in TABLES]
    for relative in copies:
        with atomic_output(folder / relative.name) as tmp:
            # Only a regular file inside the experiment folder is copied (src.containment).
            tmp.unlink()
            copy_file(source, relative, tmp)
    for stale in folder.glob("*.png"):
        if stale.stem not in drawn:
            stale.unlink()

    lines = [
        f"# Results of the experiment {md_code(source.name)}",
        "",
        f"What the workflow produces on `{config_file}`, as a newcomer sees it. The page and "
        f"the figures and tables in `{name}/` are generated: `make {name}` runs the workflow "
        "(if anything changed) and rewrites them from "
        f"`{source.as_posix()}/`; do not edit them by hand. How the numbers are computed: "
        "[design.md](design.md) (sections 1 and 7), the columns: [schemas.md](schemas.md).",
        "",
        "## Setup",
        "",
        *_setup(configs, source.name),
        "",
        "## Summary table",
        "",
        "One row per env and policy (`shield (shield off)` is the shield's base policy "
        "evaluated without its shield). Cells are `estimate [interval]`.",
        "",
        _page_markdown(_read_text(source, "tables/summary.md")).strip(),
        "",
        "## What this run shows",
        "",
        "Computed from the tables above and the training histories each time the page is "
        "written. The risk floor of each task is the summary's last table; how it is "
        "computed: [design.md](design.md) (section 5.1), and its measurement on the paper's "
        "grid: [BENCHMARKS.md](../benchmarks/BENCHMARKS.md) (risk floors).",
        "",
        *_observations(source, configs, comparisons, alpha=alpha),
        "",
    ]
    certificates = certificate_lines(evaluation, configs)
    if certificates:
        statement = CERTIFICATE_STATEMENT.format(horizon="H", max_risk="`max_risk`")
        family = certificate_family(evaluation, configs)
        lines += [
            "## Certificates of the shields",
            "",
            "At the end of training the shield tests its allowances, most cautious first, on "
            "calibration episodes in the real env (reset seeds that training and evaluation "
            "never use): an allowance passes when its violating episodes are few enough for "
            "the binomial test at level delta, the test stops at the first that fails, and "
            "the shield deploys the last that passed (fixed-sequence testing, "
            "`src/algos/shield/calibration.py`). Each run's certificate is a per-run, "
            f"unconditional statement about its test: {statement} (H = the constraint "
            "horizon, delta = the level it tested at, `shield_credible_delta` / "
            "`certificate_family` from the run's config). It is not a "
            "probability that a run which was certified meets `max_risk`, and the summary's "
            '"x/y runs certified" is a count of the runs that passed, not a joint claim; the '
            "evaluation above measures every deployed policy again on other episodes.",
            "",
            *([family.statement(), ""] if family is not None else []),
            *certificates,
            "",
        ]
    compared = shield_comparison(source, configs)
    if compared:
        lines += [
            "## Shields compared",
            "",
            "Every shielded algorithm of the run, side by side: risk and return of the deployed "
            "(shielded) policy as in the summary table, its certificates, and what it cost. "
            "`central`: one shield judges the team's joint action with every agent's actual "
            "proposal; `decentralised`: each agent's shield sees only its own proposal and "
            "predicts the others with the opponent model ([design.md](design.md), section 6.3). "
            "Critic AUC: how well the critic's risks of the executed decisions rank their real "
            "outcomes (a violation within the shield's horizon or not; 0.5 is chance), at the "
            "last update, mean over the runs. Train and evaluate CPU s: CPU seconds of each run's"
            " training job (calibration episodes included) and evaluation job, mean over the "
            "runs, from the Snakemake benchmark files (the jobs ran side by side, so CPU, not "
            "wall time); filter s: wall seconds inside the shield during training, mean over the "
            "runs. Jobs that share the cores slow each other (caches, shared cores), so these "
            "costs move with what ran beside them from one run of the workflow to the next; "
            "`benchmarks/BENCHMARKS.md` has the costs measured alone, against their peers.",
            "",
            *compared,
            "",
        ]
    lines += [
        "## Figures",
        "",
        "Every figure has one panel per env and one colour per algorithm; legend labels give "
        "the number of runs behind each curve. The same figures, as PDF, are in "
        f"`{source.as_posix()}/figures/`.",
    ]
    absent = _not_drawn_line(plan)
    if absent:
        lines += ["", absent]
    for figure in drawn:
        heading, text = FIGURE_GUIDE[figure]
        lines += ["", f"### {heading}", "", f"![{heading}]({name}/{figure}.png)", "", text]
    lines += [
        "",
        "## Tables",
        "",
        "The numbers of this page, as the workflow wrote them: "
        + ", ".join(f"[`{table}`]({name}/{table})" for table in TABLES)
        + " (columns: [schemas.md](schemas.md)).",
    ]
    target = docs / f"{name}.md"
    write_text("\n".join(lines) + "\n", target)
    return target


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: `python -m src.analysis.results_doc CONFIG DOCS_DIR [--name NAME]`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="workflow config file, e.g. config/config.yaml")
    parser.add_argument("docs", help="docs folder to write NAME.md and NAME/ into")
    parser.add_argument(
        "--name", default=RESULTS_FOLDER, help="the page's name (results, paper): NAME.md"
    )
    args = parser.parse_args(argv)
    try:
        path = write_results_doc(
            experiment_dir(args.config), args.docs, config_file=args.config, name=args.name
        )
    except ContainmentError as error:
        # One line naming the file: a results folder that leads outside is refused, not read.
        print(f"refused: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
