"""The `evaluation` section of the run config: how the final policy is evaluated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from src.config.section import Section

__all__ = ["DEFAULT_EVAL_BATCH", "EvalConfig"]

# Env copies per evaluation batch unless the run config sets `final_policy_eval_num_envs`. The
# actor samples all copies of a batch from one generator, so the numbers depend on this size:
# it is part of the evaluation's definition, like the seeds.
DEFAULT_EVAL_BATCH = 100


@dataclass(frozen=True, kw_only=True)
class EvalConfig(Section):
    """Final-policy evaluation: N seeded episodes, violation probabilities per horizon."""

    BASE_KEYS: ClassVar[tuple[str, ...]] = (
        "final_policy_eval_episodes",
        "final_policy_eval_horizons",
        "final_policy_eval_seed_offset",
        "final_policy_eval_confidence",
        "final_policy_eval_num_envs",
    )

    final_policy_eval_episodes: int
    """Episodes N per run; run r's episode i is seeded `final_policy_eval_seed_offset + r*N + i`."""
    final_policy_eval_horizons: tuple[int, ...]
    """Horizons H (strictly increasing) of P(violation within H steps)."""
    final_policy_eval_seed_offset: int
    """Seed of the first evaluation episode of run 0."""
    final_policy_eval_confidence: float
    """Confidence level of the Clopper-Pearson intervals."""
    final_policy_eval_num_envs: int = DEFAULT_EVAL_BATCH
    """Env copies per evaluation batch (part of the evaluation's definition)."""

    def __post_init__(self) -> None:
        """Horizons as a tuple (they arrive as a list from JSON)."""
        object.__setattr__(
            self, "final_policy_eval_horizons", tuple(self.final_policy_eval_horizons)
        )

    @property
    def episodes(self) -> int:
        """Evaluation episodes N."""
        return self.final_policy_eval_episodes

    @property
    def horizons(self) -> tuple[int, ...]:
        """Horizons, increasing."""
        return self.final_policy_eval_horizons

    @property
    def max_horizon(self) -> int:
        """The largest horizon: the evaluation lifts the hidden cap to it."""
        return self.final_policy_eval_horizons[-1]

    def first_seed(self, run_idx: int) -> int:
        """Reset seed of run `run_idx`'s first evaluation episode.

        Run r evaluates seeds `final_policy_eval_seed_offset + r * N + i`, i < N: the same for
        every algorithm (comparisons are paired), disjoint between runs (episodes pooled over
        runs are independent layouts)."""
        return self.final_policy_eval_seed_offset + run_idx * self.final_policy_eval_episodes

    def seeds(self, run_idx: int) -> list[int]:
        """Reset seed of every evaluation episode of run `run_idx`."""
        first = self.first_seed(run_idx)
        return [first + i for i in range(self.final_policy_eval_episodes)]

    @property
    def batch_size(self) -> int:
        """Env copies per batch: at most one batch of all episodes."""
        return min(self.final_policy_eval_num_envs, max(self.final_policy_eval_episodes, 1))
