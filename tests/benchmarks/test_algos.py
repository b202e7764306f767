"""The IPPO-vs-skrl benchmark: the Box-action comparison on a tiny budget, and how a run of one
kind of actions keeps the saved results of the other in the section it writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from benchmarks import algos
from benchmarks.common import markers
from src.algos.actions import team_action_box
from src.envs.registry import make_vector_env

TINY = ["--steps", "512", "--continuous-steps", "1024", "--seeds", "2", "--grid-steps", "512"]


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Any:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _fake_discrete(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the Discrete training and env runs by fixed figures (the Box runs stay real)."""
    real_ours, real_skrl, real_bare = algos.run_ours, algos.run_skrl, algos.run_bare
    breakdown = {"env step": 10.0, "acting and bookkeeping": 20.0, "PPO update": 70.0}

    def ours(*args: Any, continuous: bool = False, **kwargs: Any) -> dict[str, Any]:
        if continuous:
            return real_ours(*args, continuous=True, **kwargs)
        return {
            "steps_per_s": 3000.0 + kwargs["seed"],
            "steps_per_cpu_s": 6000.0,
            "final_return": -70.0 + kwargs["seed"],
            "initial_return": -90.0,
            "cpu_us_per_step": breakdown,
        }

    def skrl(*args: Any, continuous: bool = False, **kwargs: Any) -> dict[str, Any]:
        if continuous:
            return real_skrl(*args, continuous=True, **kwargs)
        rate = 400.0 if kwargs.get("backend") == "mpe2" else 2000.0
        return {
            "steps_per_s": rate + kwargs["seed"],
            "steps_per_cpu_s": rate,
            "final_return": -71.0 - kwargs["seed"],
            "initial_return": -90.0,
        }

    def bare(*args: Any, continuous: bool = False, **kwargs: Any) -> dict[str, float]:
        if continuous:
            return real_bare(*args, continuous=True, **kwargs)
        return {"steps_per_s": 50000.0, "steps_per_cpu_s": 75000.0}

    monkeypatch.setattr(algos, "run_ours", ours)
    monkeypatch.setattr(algos, "run_skrl", skrl)
    monkeypatch.setattr(algos, "run_bare", bare)
    monkeypatch.setattr(
        algos, "run_bare_mpe2", lambda **kwargs: {"steps_per_s": 1900.0, "steps_per_cpu_s": 2000.0}
    )


def _section(path: Path) -> str:
    start, end = markers("algos")
    return path.read_text().split(start, 1)[1].split(end, 1)[0]


def test_the_recorder_hands_the_trainer_the_box_of_continuous_spread() -> None:
    env = make_vector_env("spread", num_envs=2, seed=0, n_agents=3, **algos.CONTINUOUS)
    recorder = algos.EpisodeRecorder(env)
    box = team_action_box(recorder, env_name="spread", params={"n_agents": 3, **algos.CONTINUOUS})
    assert box is not None and box.shape == (5,)
    assert box.low.tolist() == [0.0] * 5 and box.high.tolist() == [1.0] * 5
    discrete = algos.EpisodeRecorder(make_vector_env("spread", num_envs=2, seed=0, n_agents=3))
    assert team_action_box(discrete, env_name="spread", params={"n_agents": 3}) is None


def test_the_skrl_wrapper_steps_the_native_env_with_box_actions() -> None:
    env = make_vector_env("spread", num_envs=2, seed=0, n_agents=3, **algos.CONTINUOUS)
    recorder = algos.EpisodeRecorder(env)
    wrapper = algos._skrl_wrapper(recorder, continuous=True)
    space = wrapper.action_spaces["agent_0"]
    assert space.shape == (5,) and float(space.low.min()) == 0.0 and float(space.high.max()) == 1.0
    obs, _ = wrapper.reset()
    assert obs["agent_0"].shape == (2, recorder.obs_dim)
    actions = {uid: torch.full((2, 5), 0.5) for uid in wrapper.possible_agents}
    obs, reward, terminated, _, _ = wrapper.step(actions)
    assert reward["agent_2"].shape == (2, 1) and terminated["agent_2"].dtype == torch.bool
    assert obs["agent_1"].shape == (2, recorder.obs_dim) and recorder.steps == 2
    discrete = algos.EpisodeRecorder(make_vector_env("spread", num_envs=2, seed=0, n_agents=3))
    with pytest.raises(ValueError, match="Discrete actions"):
        algos._skrl_wrapper(discrete, continuous=True)


def test_a_box_run_alone_leaves_the_section_and_a_discrete_one_then_writes_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "BENCHMARKS.md"
    start, end = markers("algos")
    path.write_text(f"# Benchmarks\n\n{start}\nold figures\n{end}\n")
    algos.main(["--actions", "continuous", *TINY], out=tmp_path, path=path)
    assert _section(path) == "\nold figures\n"  # no Discrete results saved: left as it is
    results = json.loads((tmp_path / "algos.json").read_text())
    assert set(results) == {"continuous"}
    box = results["continuous"]
    assert box["env_steps_per_run"] == 1024 and box["seeds"] == 2 and box["log_std_init"] == 0.0
    for variant in algos.VARIANTS["continuous"]:
        assert len(box["steps_per_cpu_s"][variant]) == 2
        assert all(rate > 0 for rate in box["steps_per_s"][variant])
        for key in ("initial_return", "final_return"):
            assert all(math.isfinite(r) and r < 0 for r in box[key][variant])
    low, high = box["steps_per_cpu_s"]["speedup_ci95"]["skrl"]
    assert 0 < low <= high and box["steps_per_cpu_s"]["speedup_vs"]["skrl"] > 0
    box_markdown = algos.render_continuous(box)
    assert box_markdown.startswith("### Box actions (Gaussian policies)")
    assert "- throughput >= 1x skrl's at equal settings: " in box_markdown
    assert "- final return not worse than skrl's" in box_markdown

    _fake_discrete(monkeypatch)
    algos.main(["--actions", "discrete", *TINY], out=tmp_path, path=path)
    merged = json.loads((tmp_path / "algos.json").read_text())
    assert set(merged) == {"discrete", "continuous"} and merged["continuous"] == box
    discrete = merged["discrete"]
    # The fakes' figures: ours 6000 env-steps per CPU second against skrl's 2000 and 400.
    assert discrete["steps_per_cpu_s"]["speedup_vs"] == {"skrl": 3.0, "skrl_mpe2": 15.0}
    assert discrete["steps_per_cpu_s"]["bare"] == {
        "ours": 75000.0,
        "skrl": 75000.0,
        "skrl_mpe2": 2000.0,
    }
    section = _section(path)
    assert algos.render_discrete(discrete) in section and box_markdown in section
    assert section.index("| ours (native spread) |") < section.index("### Box actions")
    assert (
        "- throughput >= 3x the faster skrl variant (skrl (native spread)): 3.00x, met." in section
    )
    assert "| ours / this variant, per CPU second | 1.00x | 3.00x | 15.00x |" in section
    # A Discrete run again keeps the Box results saved and rewrites both.
    algos.main(["--actions", "discrete", *TINY], out=tmp_path, path=path)
    assert json.loads((tmp_path / "algos.json").read_text())["continuous"] == box


def test_the_ratio_interval_comes_from_the_seeds_paired_runs() -> None:
    low, high = algos._ratio_ci([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    low, high = algos._ratio_ci([3.0, 2.0, 2.5], [1.0, 1.1, 0.9])
    assert low < float(np.exp(np.mean(np.log([3.0, 2.0 / 1.1, 2.5 / 0.9])))) < high
