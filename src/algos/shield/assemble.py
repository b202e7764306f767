"""Assembling the shield from its parts, for training and for the deployed (evaluated) policy.

`build_shield` is the one place the world model, safety critic, opponent model and shield
are built from a ShieldConfig, with seeds derived from the run seed; `load_shield` rebuilds the
trained shield from policy.pt (`ShieldedIPPO.extra_policy_state`). With a Box (`box`), the
models take float actions and the shield is the candidate filter of `box.BoxShield`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from src.algos.actions import BoxActions
from src.algos.networks import ActorCritic
from src.algos.seeding import derived_seeds
from src.algos.shield.box import BoxShield
from src.algos.shield.budget import BudgetShield
from src.algos.shield.calibration import POLICY_STATE_KEY, CalibrationMap
from src.algos.shield.critic import RiskCritic
from src.algos.shield.opponent_model import OpponentMLP, make_opponent_model
from src.algos.shield.world_model import TeamWorldModel, make_world_model
from src.checks import lookup
from src.config.run import RunConfig
from src.config.shield import RETIRED_KEYS, ShieldConfig

__all__ = [
    "SHIELD_VERSIONS",
    "ShieldParts",
    "build_shield",
    "load_shield",
]


@dataclass
class ShieldParts:
    """A shield with the models it owns (the opponent model only where its config uses it;
    otherwise None)."""

    shield: BudgetShield
    world_model: TeamWorldModel
    critic: RiskCritic
    opponent_model: OpponentMLP | None = None


def _build_budget_shield(
    config: ShieldConfig,
    dims: dict[str, int],
    *,
    seeds: list[int],
    box: BoxActions | None = None,
) -> ShieldParts:
    """Joint action, receding allowance, learned safest continuation; with
    `coordination: decentralised` also the opponent model that predicts the others; with a
    `box` (Box actions of `dims["n_actions"]` entries), the candidate filter."""
    wm_seed, critic_seed, om_seed = seeds
    world_model = make_world_model(
        config.wm_version, **dims, config=config, seed=wm_seed, continuous=box is not None
    )
    opponent_model = None
    if config.coordination == "decentralised":
        opponent_model = make_opponent_model(
            config.om_version, **dims, config=config, seed=om_seed, continuous=box is not None
        )
    critic = RiskCritic(
        **dims,
        ensemble_size=config.ensemble_size,
        hidden=tuple(config.critic_hidden),
        learning_rate=config.critic_learning_rate,
        tau=config.critic_tau,
        horizon=config.horizon,
        seed=critic_seed,
        sweeps=config.search_sweeps,
        box=None if box is None else _bounds(box),
        candidates=config.candidates,
    )
    kind: Any = BudgetShield if box is None else partial(BoxShield, box=box)
    shield = kind(
        config=config,
        world_model=world_model,
        critic=critic,
        opponent_model=opponent_model,
        seed=om_seed,
        **dims,
    )
    return ShieldParts(
        shield=shield, world_model=world_model, critic=critic, opponent_model=opponent_model
    )


def _bounds(box: BoxActions) -> tuple[torch.Tensor, torch.Tensor]:
    """The Box's bounds as float32 tensors [k]."""
    return torch.from_numpy(box.low).float(), torch.from_numpy(box.high).float()


# shield_version -> builder of the shield and the models it owns.
SHIELD_VERSIONS: dict[str, Callable[..., ShieldParts]] = {"v0": _build_budget_shield}


def build_shield(
    config: ShieldConfig,
    *,
    n_agents: int,
    obs_dim: int,
    n_actions: int,
    seed: int,
    box: BoxActions | None = None,
) -> ShieldParts:
    """The shield of `config.shield_version` and its models, seeded from `seed`; with a `box`
    (Box actions, `n_actions` its entries), the models on float actions and `BoxShield`."""
    build = lookup(SHIELD_VERSIONS, config.shield_version, "shield_version")
    dims = {"n_agents": n_agents, "obs_dim": obs_dim, "n_actions": n_actions}
    if box is None:
        return build(config, dims, seeds=derived_seeds(seed, 3))
    return build(config, dims, seeds=derived_seeds(seed, 3), box=box)


def load_shield(
    policy_state: Mapping[str, Any],
    config: RunConfig,
    *,
    net: ActorCritic,
    box: BoxActions | None = None,
) -> BudgetShield:
    """Rebuild the trained shield of a shielded run from its policy.pt content.

    `policy_state` is the dict loaded from policy.pt (the shield under `shield`), `config` the
    run's config (its `seed` seeds the models, whose weights are then loaded, and the
    decentralised shield's sampling until `reset`), `net` the run's trained actor-critic (its
    dimensions size the models), `box` the Box of a Gaussian policy's actions.
    """
    if POLICY_STATE_KEY not in policy_state:
        raise ValueError(
            f"policy state has no {POLICY_STATE_KEY!r} entry: not a shield run "
            f"(keys: {sorted(policy_state)})"
        )
    saved = policy_state[POLICY_STATE_KEY]
    if "critic" not in saved:
        raise ValueError(
            f"policy state's {POLICY_STATE_KEY!r} entry has no 'critic': a run of the old v0 "
            "shield, which was removed (keys: " + ", ".join(sorted(saved)) + ")"
        )
    retired = sorted(set(saved["config"]) & set(RETIRED_KEYS))
    if retired:
        raise ValueError(
            f"policy state's {POLICY_STATE_KEY!r} config sets "
            + "; ".join(f"{key}: removed ({RETIRED_KEYS[key]})" for key in retired)
            + ": a run of an older code version"
        )
    parts = build_shield(
        ShieldConfig(**saved["config"]),
        n_agents=net.n_agents,
        obs_dim=net.obs_dim,
        n_actions=net.n_actions,
        seed=config.seed,
        box=box,
    )
    shield = parts.shield
    parts.world_model.load_state_dict(saved["world_model"])
    if parts.opponent_model is not None:
        parts.opponent_model.load_state_dict(saved["opponent_model"])
        shield.opponent_weight = float(saved["opponent_weight"])
    shield.critic.load_state_dict(saved["critic"])
    calibration = saved["calibration"]
    if isinstance(calibration, dict):
        shield.calibration = CalibrationMap.from_dict(calibration)
    else:
        shield.calibration = float(calibration)
    if "allowance" in saved:
        shield.allowance = float(saved["allowance"])
    else:
        # Runs from before the allowance allowed c * q <= max_risk.
        shield.allowance = shield.config.max_risk / max(float(calibration), 1e-12)
    return shield
