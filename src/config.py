"""Workflow configuration: validation against the schema, and the resolved config of one run.

The workflow (`workflow/rules/common.smk`) calls `check_workflow_config` once, before any job:
the schema (`workflow/schemas/config.schema.yaml`) checks types, ranges and names and fills
defaults; then every run config is resolved through `create_base_config`, which checks values
and cross-key rules (e.g. `mini_batches` divides the PPO batch). Every failure is a
`WorkflowConfigError` whose message is one line naming the key and the value.

`resolve_run_config` is also what the train rule passes to `train_run`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from src.core.wandb import ConfigError, create_base_config

__all__ = [
    "SCHEMA_PATH",
    "WorkflowConfigError",
    "check_workflow_config",
    "iter_runs",
    "resolve_run_config",
    "validate_workflow_config",
]

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"

# Keys of the resolved run config that are not create_base_config arguments.
_RUN_KEYS = ("algo", "run_idx", "seed", "env_params", "algo_params", "threads", "checkpoint_every")


class WorkflowConfigError(ConfigError):
    """The workflow config is invalid; the message is one line naming the key and value."""


def _one_line(value: Any, limit: int = 80) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key_path(parts: Any) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<config>"


def _schema_message(error: Any) -> str:
    """One line for a jsonschema error: the key path, the value and what was expected."""
    key = _key_path(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(known))
        where = "" if key == "<config>" else f"{key}."
        names = ", ".join(f"'{where}{name}'" for name in extra)
        return f"unknown config key {names} (known keys: {', '.join(known) or 'none'})"
    if error.validator == "required":
        return f"config key '{key}': {error.message}"
    if error.validator == "enum":
        choices = ", ".join(str(choice) for choice in error.validator_value)
        return f"config key '{key}' = {_one_line(error.instance)}: must be one of {choices}"
    return f"config key '{key}' = {_one_line(error.instance)}: {error.message}"


def _base_message(message: str, workflow_config: Mapping[str, Any], env: str) -> str:
    """Name a create_base_config error (``key=value: why``) by its key in the workflow config."""
    match = re.match(r"(\w+)=(.*?): (.*)", message)
    if match is None:
        return f"config for env {env}: {message}"
    key, value, why = match.groups()
    if key == "n_agents":
        path = f"env_params.{env}.n_agents"
    elif key in workflow_config.get("base", {}):
        path = f"base.{key}"
    else:
        path = key
    return f"config key '{path}' = {value}: {why} (env {env})"


def _validator_with_defaults(schema: dict) -> Any:
    """A Draft 2020-12 validator that also fills `default` values (as Snakemake's validate)."""
    from jsonschema import Draft202012Validator, validators

    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict, instance: Any, schema: dict) -> Any:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    # A copy: the schema's default object must not be shared between configs.
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from check_properties(validator, properties, instance, schema)

    extended = validators.extend(Draft202012Validator, {"properties": set_defaults})
    return extended(schema)


def validate_workflow_config(config: dict, schema_path: str | Path = SCHEMA_PATH) -> dict:
    """Validate `config` against the workflow schema and fill its defaults in place.

    Returns `config`. Raises `WorkflowConfigError` (one line naming the key and the value)
    for the first problem found, e.g. ``config key 'base.num_envs' = 0: 0 is less than the
    minimum of 1``, and for an env in `envs` without an `env_params` entry.
    """
    from jsonschema.exceptions import best_match

    if not isinstance(config, dict):
        raise WorkflowConfigError(f"the config must be a mapping, got {_one_line(config)}")
    with open(schema_path, encoding="utf-8") as handle:
        schema = yaml.safe_load(handle)
    validator = _validator_with_defaults(schema)
    error = best_match(validator.iter_errors(config))
    if error is not None:
        raise WorkflowConfigError(_schema_message(error))
    for env in config["envs"]:
        if env not in config["env_params"]:
            raise WorkflowConfigError(
                f"config key 'env_params.{env}' is missing: every env in 'envs' needs its "
                "parameters (at least n_agents)"
            )
    return config


def resolve_run_config(
    workflow_config: Mapping[str, Any], env: str, algo: str, run_idx: int
) -> dict:
    """Return the resolved config of one run (docs/architecture.md, "Resolved run config").

    `workflow_config` is a validated workflow config (`validate_workflow_config`). The result
    is `create_base_config(...)` for `env` with the shared `base` values, plus `algo`,
    `run_idx`, `seed` (= `seed_offset + run_idx`), `env_params` (the workflow's env_params of
    `env` without `n_agents`, which is a base-config key), `algo_params`, `threads`,
    `checkpoint_every`, and the wandb settings `wandb_project` / `wandb_mode` read by
    `start_run`. Raises `WorkflowConfigError` naming the env, algorithm and bad key.
    """
    if env not in workflow_config["envs"]:
        raise WorkflowConfigError(
            f"env={env!r}: not in the config's envs {workflow_config['envs']}"
        )
    if algo not in workflow_config["algos"]:
        raise WorkflowConfigError(
            f"algo={algo!r}: not in the config's algos {workflow_config['algos']}"
        )
    if isinstance(run_idx, bool) or not isinstance(run_idx, int):
        raise WorkflowConfigError(f"run_idx={run_idx!r}: must be an int")
    if not 0 <= run_idx < workflow_config["num_runs"]:
        raise WorkflowConfigError(
            f"run_idx={run_idx!r}: must be in [0, num_runs={workflow_config['num_runs']})"
        )
    base = dict(workflow_config["base"])
    base["final_policy_eval_horizons"] = tuple(base["final_policy_eval_horizons"])
    env_params = dict(workflow_config["env_params"][env])
    # n_agents is a base-config value (create_base_config); env_params holds the env's own rest.
    n_agents = env_params.pop("n_agents")
    algo_params = dict(workflow_config["algo_params"].get(algo, {}))
    try:
        cfg = create_base_config(
            env_name=env,
            n_agents=n_agents,
            num_runs=workflow_config["num_runs"],
            experiment_tag=workflow_config["experiment_tag"],
            wandb_project=workflow_config["wandb"]["project"],
            wandb_mode=workflow_config["wandb"]["mode"],
            **base,
        )
    except ConfigError as error:
        raise WorkflowConfigError(_base_message(str(error), workflow_config, env)) from None
    cfg.update(
        algo=algo,
        run_idx=run_idx,
        seed=cfg["seed_offset"] + run_idx,
        env_params=env_params,
        algo_params=algo_params,
        threads=workflow_config["threads"],
        checkpoint_every=workflow_config["checkpoint_every"],
    )
    return cfg


def iter_runs(workflow_config: Mapping[str, Any]) -> Iterator[tuple[str, str, int]]:
    """Yield (env, algo, run_idx) of every training run, in a fixed order."""
    for env in workflow_config["envs"]:
        for algo in workflow_config["algos"]:
            for run_idx in range(workflow_config["num_runs"]):
                yield env, algo, run_idx


def _check_env_params(env: str, params: Mapping[str, Any]) -> None:
    """Build the env once so its own constructor checks its parameters."""
    from src.envs.registry import make_env

    try:
        instance = make_env(env, **params)
    except (TypeError, ValueError) as error:
        message = " ".join(str(error).split())
        raise WorkflowConfigError(f"config key 'env_params.{env}': {message}") from None
    instance.close()


# Run-config key of an implementation version -> its registry in src.algos.registry.
_VERSION_REGISTRIES = {
    "ippo_version": "IPPO_VERSIONS",
    "lag_version": "LAG_VERSIONS",
    "wm_version": "WM_VERSIONS",
    "om_version": "OM_VERSIONS",
    "shield_version": "SHIELD_VERSIONS",
}


def _check_versions(run_config: Mapping[str, Any]) -> None:
    """Look up every implementation version the algorithm of `run_config` uses in its registry,
    so a misspelt `base.*_version` fails here, labelled by its key, rather than in a train job.

    `ippo_version` for every algorithm (all build on IPPO), `lag_version` for `ippo_lag`,
    `wm_version` / `om_version` / `shield_version` for shielded algorithms.
    """
    from src.algos import registry

    spec = registry.ALGORITHMS[run_config["algo"]]
    keys = ["ippo_version"]
    if run_config["algo"] == "ippo_lag":
        keys.append("lag_version")
    if spec.shielded:
        keys += ["wm_version", "om_version", "shield_version"]
    for key in keys:
        # The shield's registries come through registry.__getattr__, imported on first use.
        versions = getattr(registry, _VERSION_REGISTRIES[key])
        value = run_config[key]
        if not isinstance(value, str) or value not in versions:
            known = ", ".join(sorted(versions))
            raise WorkflowConfigError(
                f"config key 'base.{key}' = {_one_line(value)}: unknown {key} for algo "
                f"{run_config['algo']} (known: {known})"
            )


def _check_algo_params(run_config: Mapping[str, Any]) -> None:
    """Build the algorithm's config dataclasses from a resolved run config, as its trainer does,
    so unknown `algo_params` keys and bad values fail here rather than in a training job.

    The implementation versions are looked up first (`_check_versions`), so that their errors
    name `base.<key>` rather than the algorithm's `algo_params`.
    """
    from src.algos.registry import ALGORITHMS

    _check_versions(run_config)
    algo = run_config["algo"]
    spec = ALGORITHMS[algo]
    try:
        ignore: tuple[str, ...] = ()
        if spec.shielded:
            from src.algos.shield.config import ShieldConfig

            ShieldConfig.from_run_config(run_config)
            ignore = tuple(ShieldConfig.tunable_names())
        spec.trainer().config_cls.from_params(run_config["algo_params"], ignore=ignore)
    except (TypeError, ValueError) as error:
        message = " ".join(str(error).split())
        raise WorkflowConfigError(f"config key 'algo_params.{algo}': {message}") from None


def check_workflow_config(
    config: dict, schema_path: str | Path = SCHEMA_PATH, *, check_components: bool = True
) -> dict:
    """Validate the workflow config completely before any job runs; fill defaults in place.

    The schema first, then every run's config through `resolve_run_config` (so value and
    cross-key errors of `create_base_config` surface here), then, with `check_components`,
    each env's parameters through its constructor, each algorithm's implementation versions
    (`base.ippo_version`, `base.lag_version`, `base.wm_version`, ...) against their registries
    and its `algo_params` against its config dataclass. Returns `config`; raises
    `WorkflowConfigError` with one line.
    """
    validate_workflow_config(config, schema_path)
    for env, algo, run_idx in iter_runs(config):
        resolve_run_config(config, env, algo, run_idx)
    if check_components:
        for env in config["envs"]:
            _check_env_params(env, config["env_params"][env])
        for algo in config["algos"]:
            _check_algo_params(resolve_run_config(config, config["envs"][0], algo, 0))
    return config
