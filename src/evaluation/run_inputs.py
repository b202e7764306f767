"""What evaluating or rendering a run reads from its folder, checked before anything is built.

A run folder may come from elsewhere (results handed over to re-evaluate), so its
`config.json` and `policy.pt` are input like a config. config.json is read bounded and typed
by `src.config.recorded.read_run_config`; before a network is built or an episode played:

- `check_policy(run_dir, config)`: the run's policy.pt. Its own config is read like
  config.json's (`src.config.recorded.recorded_run_config`: bounded, since a few kilobytes of shared
  references in a pickle can stand for billions of values) and agrees with the run config in
  every value that sizes a network (the agents, the PPO and shield hidden sizes, the shield's
  ensemble); its recorded network (`network`: `obs_dim`, `n_agents`, `n_actions`,
  `hidden_sizes`) is the run config's and no larger than the weights the file holds; the
  networks the config builds fit in half the job's memory (`src.containment.archive_limit`).
  Returns the recorded (obs_dim, n_actions).
- `check_eval_memory(config, path, ...)`: the evaluation's estimated peak memory
  (`src.resources.eval_memory_mb`, the estimate the workflow checks its config with) within
  the job's `mem_mb` (the machine's memory outside a workflow job), so a config.json asking
  400,000 episodes at horizon 5,000 is refused as the same values in a workflow config are.

Every refusal is a `CorruptFileError` (a `ValueError`), one line naming the file: a workflow
job ends with that line, without a traceback. A bad value of a recorded config is a
`src.runfiles.RunConfigError`, also the `src.checks.ConfigError` that names the key and the
value.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from src.algos.actions import POLICY_KEY
from src.checks import is_int, shown
from src.config.recorded import recorded_run_config
from src.config.run import RunConfig
from src.containment import archive_limit, memory_bound
from src.core.io import CorruptFileError, load_from_file_if_exists
from src.resources import eval_memory_mb, mlp_params, train_memory_mb
from src.runfiles import RunFiles

__all__ = ["MAX_LAYERS", "check_eval_memory", "check_policy"]

MAX_LAYERS = 64
"""The most hidden layers a recorded network may have."""

_MB = 1024.0**2


def _listed(value: Any) -> str:
    """A value for a message, a tuple shown as the list a JSON file holds."""
    return shown(list(value) if isinstance(value, tuple) else value)


def _refused(path: Path, why: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: {why}", path=path, format=path.suffix)


def _sizes(config: RunConfig) -> dict[str, Any]:
    """The values of a run config that size a network."""
    sizes: dict[str, Any] = {
        "n_agents": config.env.n_agents,
        "hidden_sizes": tuple(config.ppo.hidden_sizes),
    }
    if config.shield is not None:
        for key in ("ensemble_size", "wm_hidden", "om_hidden", "critic_hidden"):
            sizes[f"shield {key}"] = getattr(config.shield, key, None)
    return sizes


def _network_shape(network: Any, path: Path) -> tuple[int, int, int, tuple[int, ...]]:
    """(obs_dim, n_agents, n_actions, hidden_sizes) of a recorded network, each checked."""
    if not isinstance(network, Mapping):
        raise _refused(path, f"its entry 'network' is a {type(network).__name__}, not a dict")
    values = []
    for key in ("obs_dim", "n_agents", "n_actions"):
        value = network.get(key)
        if not is_int(value) or value < 1:
            raise _refused(path, f"its network records {key}={shown(value)}, not an int >= 1")
        values.append(int(value))
    hidden = network.get("hidden_sizes")
    if (
        not isinstance(hidden, list | tuple)
        or len(hidden) > MAX_LAYERS
        or not all(is_int(h) and h >= 1 for h in hidden)
    ):
        raise _refused(
            path,
            f"its network records hidden_sizes={shown(hidden)}, not a list of at most "
            f"{MAX_LAYERS} ints >= 1",
        )
    return values[0], values[1], values[2], tuple(int(h) for h in hidden)


def _weights(state: Mapping[str, Any]) -> int:
    """The number of weights the policy's `actor_critic` entry holds."""
    weights = state.get("actor_critic")
    if not isinstance(weights, Mapping):
        return 0
    return sum(int(value.numel()) for value in weights.values() if hasattr(value, "numel"))


def check_policy(run_dir: str | Path, config: RunConfig) -> tuple[int, int, bool] | None:
    """Check the run's policy.pt against the run config `config` (see the module docstring)
    before any network is built; (obs_dim, n_actions, whether its actions are a Box) of its
    recorded network, None for a policy without one (an algorithm given by import path keeps
    its own format) or a run without a policy.pt (its loader names the missing file)."""
    path = RunFiles(run_dir).policy
    missing = object()
    state = load_from_file_if_exists(path.parent, path.name, default=missing)
    if state is missing:
        return None  # nothing to check: the policy's loader names the missing file
    if not isinstance(state, Mapping):
        raise _refused(path, f"holds a {type(state).__name__}, not a dict of policy state")
    if "config" in state:
        expected, recorded = _sizes(config), _sizes(recorded_run_config(state["config"], path))
        for key, value in expected.items():
            if recorded.get(key) != value:
                raise _refused(
                    path,
                    f"its run config has {key}={_listed(recorded.get(key))}, the run's "
                    f"config.json {_listed(value)}: the policy is not this run's",
                )
    if "network" not in state:
        return None
    obs_dim, n_agents, n_actions, hidden = _network_shape(state["network"], path)
    for key, value, wanted in (
        ("n_agents", n_agents, config.env.n_agents),
        ("hidden_sizes", hidden, tuple(config.ppo.hidden_sizes)),
    ):
        if value != wanted:
            raise _refused(
                path,
                f"its network records {key}={_listed(value)}, the run config says "
                f"{_listed(wanted)}: nothing was built",
            )
    # The actor and the critic alone: the weights of the network its record describes.
    needed = mlp_params(obs_dim + n_agents, hidden, n_actions) + mlp_params(
        obs_dim + n_agents, hidden, 1
    )
    held = _weights(state)
    if needed > held:
        raise _refused(
            path,
            f"its network (obs_dim {obs_dim}, n_actions {n_actions}, hidden_sizes "
            f"{_listed(hidden)}) needs at least {needed} weights, the file holds {held}: "
            "nothing was built",
        )
    box = POLICY_KEY in state
    parts = train_memory_mb(config, obs_dim=obs_dim, n_actions=n_actions, box=box)
    # The parts count weights, gradients and two Adam moments; a policy holds the weights.
    built = (parts["networks"] + parts.get("shield models", 0.0)) / 4 * _MB
    limit, why = archive_limit()
    if built > limit:
        raise _refused(
            path,
            f"the networks of its run config take {built / _MB:.1f} MB, above the limit of "
            f"{limit / _MB:.1f} MB ({why}): nothing was built",
        )
    return obs_dim, n_actions, box


def check_eval_memory(
    config: RunConfig, path: str | Path, *, obs_dim: int = 1, n_actions: int = 1, box: bool = False
) -> None:
    """Refuse an evaluation of `config` (read from `path`) whose estimated peak memory
    (`src.resources.eval_memory_mb`) exceeds the job's `mem_mb` (outside a workflow job, the
    machine's memory), naming the episodes and horizon, before any episode is played."""
    parts = eval_memory_mb(config, obs_dim=obs_dim, n_actions=n_actions, box=box)
    bound, why = memory_bound()
    if parts["total"] <= bound:
        return
    biggest = max((key for key in parts if key != "total"), key=lambda key: parts[key])
    settings = config.evaluation
    raise _refused(
        Path(path),
        f"final_policy_eval_episodes={settings.episodes} at horizons up to "
        f"{settings.max_horizon}: the evaluation needs about {parts['total']:.0f} MB (largest "
        f"part: {biggest}, {parts[biggest]:.0f} MB), more than {why}; nothing was evaluated",
    )
