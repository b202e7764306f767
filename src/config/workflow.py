"""Workflow configuration: the YAML config checked before any job, and each run's RunConfig.

The workflow (`workflow/rules/common.smk`) calls `check_workflow_config` once, before any job.
The schema (`workflow/schemas/config.schema.yaml`) checks the structure (known keys, types and
ranges of the workflow's own keys) and fills defaults; each `base.*` value is checked by its
one rule in `src.config.base`; the tasks and algorithms given by import path (`custom_envs`,
`custom_algos`) are registered (`src.custom`) and, with `check_components`, imported and
checked; env and algorithm names are looked up in their registries; then the run config of
every (env, algo) is built (`resolve_run_config`), which checks the cross-key rules, the
implementation versions and `algo_params`; with `check_components` each env is built once with
its parameters (a task given by import path also runs through an episode, `probe_task`) and
each algorithm is matched against the env's actions. Every failure is a `WorkflowConfigError`
whose message is one line naming the key (as written in the YAML) and the value.

Before any of that, the config's size is bounded (`check_config_size`): Snakemake reads the
YAML with its aliases as shared objects, which costs nothing, but anything that walks the
result (the schema's messages, a repr, hashing the jobs' parameters) expands every alias, so
a "billion laughs" config of a few hundred bytes would take gigabytes and minutes. A config
expanding to more than `MAX_CONFIG_VALUES` values, nested deeper than `MAX_CONFIG_DEPTH` or
containing itself is refused in one line naming the key, in time proportional to its text.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from src.checks import ConfigError
from src.config.base import (
    BASE_CHECKS,
    OPTIONAL_CHECKS,
    SEED_MAX,
    check_base_value,
    check_optional_value,
)
from src.config.run import SECTIONS, RunConfig
from src.config.shield import ShieldConfig
from src.custom import (
    ComponentError,
    EnvEntry,
    config_entries,
    import_folders,
    installed_folders,
    module_files,
    recorded_entries,
    register_algorithm,
    register_env,
)
from src.seeds import check_seed_uses

__all__ = [
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "REPOSITORY",
    "SCHEMA_PATH",
    "WorkflowConfigError",
    "check_config_size",
    "check_workflow_config",
    "iter_runs",
    "read_config_file",
    "resolve_run_config",
    "results_folder",
    "validate_workflow_config",
]

REPOSITORY = Path(__file__).resolve().parents[2]
"""The checkout the pipeline runs from (importable: `src` lives here)."""
SCHEMA_PATH = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"


class WorkflowConfigError(ConfigError):
    """The workflow config is invalid; the message is one line naming the key and value."""


MAX_CONFIG_VALUES = 100_000
"""Values (mappings, lists, keys and scalars) a config may expand to: the paper's grid has a
few hundred."""
MAX_CONFIG_DEPTH = 64
"""Nesting levels a config may have: the schema's deepest key is four levels down."""

_Node = dict | list | tuple


def _expanded_sizes(config: Any) -> dict[int, int]:
    """Expanded size of every container of `config` by id, each computed once (so shared
    objects, YAML's aliases, cost nothing more), capped just above `MAX_CONFIG_VALUES`.

    Iterative, so that deep nesting does not exhaust Python's stack; refuses a container that
    contains itself and nesting deeper than `MAX_CONFIG_DEPTH`.
    """
    cap = MAX_CONFIG_VALUES + 1
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool, int, tuple]] = [(config, False, 0, ())]
    while stack:
        node, leaving, depth, path = stack.pop()
        children = list(node.values()) if isinstance(node, dict) else node
        if leaving:
            own = 1 + (len(node) if isinstance(node, dict) else 0)  # a mapping's keys count
            total = own + sum(sizes[id(c)] if isinstance(c, _Node) else 1 for c in children)
            sizes[id(node)] = min(total, cap)
            open_nodes.discard(id(node))
            continue
        if id(node) in sizes:
            continue
        where = _key_path(path)
        if len(where) > 80:
            where = where[:77] + "..."
        if id(node) in open_nodes:
            raise WorkflowConfigError(
                f"config key '{where}' refers to a value that contains it (a YAML alias "
                "inside its own anchor)"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise WorkflowConfigError(
                f"config key '{where}' is nested deeper than {MAX_CONFIG_DEPTH} levels"
            )
        open_nodes.add(id(node))
        stack.append((node, True, depth, path))
        keys = list(node) if isinstance(node, dict) else range(len(node))
        for key, child in zip(keys, children, strict=True):
            if isinstance(child, _Node):
                stack.append((child, False, depth + 1, (*path, key)))
    return sizes


def check_config_size(config: Any) -> None:
    """Refuse a config that expands to more than `MAX_CONFIG_VALUES` values (YAML aliases
    repeat what they refer to), contains itself or nests deeper than `MAX_CONFIG_DEPTH`,
    before anything walks it; the message names the key, descending through mappings to the
    one that holds the expansion."""
    if not isinstance(config, _Node):
        return
    sizes = _expanded_sizes(config)
    if sizes[id(config)] <= MAX_CONFIG_VALUES:
        return
    path: list[Any] = []
    node = config
    while isinstance(node, dict):
        big = [k for k, v in node.items() if sizes.get(id(v), 1) > MAX_CONFIG_VALUES]
        if not big:
            break
        path.append(big[0])
        node = node[big[0]]
    raise WorkflowConfigError(
        f"config key '{_key_path(path)}' expands to more than {MAX_CONFIG_VALUES} values "
        f"(YAML aliases repeat what they refer to); a config holds at most {MAX_CONFIG_VALUES}"
    )


def read_config_file(path: str | Path) -> Any:
    """The YAML of the config file `path`; a file that is not valid YAML raises
    `WorkflowConfigError` with one line, ``file:line:column: problem`` (PyYAML's marks, from
    1), and where the construct it was reading began."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        raise WorkflowConfigError(_yaml_message(path, error)) from None
    except yaml.YAMLError as error:
        raise WorkflowConfigError(f"{path}: not valid YAML: {_one_line(str(error))}") from None


def _yaml_message(path: str | Path, error: Any) -> str:
    """One line for a YAML syntax error in `path`: ``file:line:column: problem (context
    at line:column)``."""
    mark = error.problem_mark or error.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = " ".join(str(error.problem or "not valid YAML").split())
    if error.context:
        context = " ".join(str(error.context).split())
        start = error.context_mark
        if start is not None and mark is not None and start.line != mark.line:
            context += f" that starts at {start.line + 1}:{start.column + 1}"
        problem += f" ({context})"
    return f"{where}: {problem}"


def _one_line(value: Any, limit: int = 80) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key_path(parts: Any) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<config>"


def _close_match(name: Any, known: Iterable[str]) -> str | None:
    """The known name closest to `name` (`difflib.get_close_matches`), if one is close."""
    if not isinstance(name, str):
        return None
    matches = difflib.get_close_matches(name, sorted(known), n=1)
    return matches[0] if matches else None


def _did_you_mean(name: Any, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the known name closest to `name` (written with `prefix`,
    the key path above it), or nothing when none is close."""
    match = _close_match(name, known)
    return f" (did you mean '{prefix}{match}'?)" if match else ""


def _meant(name: Any, known: Iterable[str], prefix: str = "") -> str:
    """``; did you mean 'x'?`` to end a message refusing `name`, or nothing (`_did_you_mean`)."""
    match = _close_match(name, known)
    return f"; did you mean '{prefix}{match}'?" if match else ""


_YAML_TEXT_NUMBER = re.compile(r"([-+]?)(\d+\.?\d*|\.\d+)(?:[eE]([-+]?)(\d+))?")


def _number_hint(value: Any, expected: Any) -> str:
    """How to write `value`, a string that reads as a number where the schema expects one
    (`expected`: its `type`), so that YAML reads a number: PyYAML follows YAML 1.1, where a
    float needs a dot and a signed exponent (`1e-3` and `1.0e3` are text, `1.0e-3` a
    number), and a quoted number is text. Nothing for any other value.

    >>> _number_hint("1e-3", "number")
    '; write it as 1.0e-3, with a dot and a signed exponent (YAML 1.1 reads 1e-3 as text)'
    >>> _number_hint("2e3", "integer")
    '; write it as 2000 (YAML 1.1 reads 2e3 as text)'
    """
    kinds = {expected} if isinstance(expected, str) else set(expected)
    match = _YAML_TEXT_NUMBER.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None or not kinds & {"number", "integer"}:
        return ""
    sign, mantissa, exponent_sign, exponent = match.groups()
    if "number" not in kinds:  # an integer: its digits, if it is one
        number = float(value)
        if not number.is_integer():
            return ""
        written = str(int(number))
    elif exponent is None:
        written = f"{sign}{mantissa}"
    else:
        whole, _, fraction = mantissa.partition(".")
        written = f"{sign}{whole or '0'}.{fraction or '0'}e{exponent_sign or '+'}{exponent}"
    if exponent is None:
        return f"; write it as {written} without quotes (a quoted number is text)"
    if written != value and "number" in kinds:
        return (
            f"; write it as {written}, with a dot and a signed exponent (YAML 1.1 reads "
            f"{value} as text)"
        )
    if written != value:
        return f"; write it as {written} (YAML 1.1 reads {value} as text)"
    return "; write it without quotes (a quoted number is text)"


def _schema_message(error: Any) -> str:
    """One line for a jsonschema error: the key path, the value and what was expected (with
    the name meant, for an unknown key close to a known one, and how to write a number that
    YAML read as text)."""
    key = _key_path(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(known))
        where = "" if key == "<config>" else f"{key}."
        names = ", ".join(f"'{where}{name}'{_suggest_key(error, name)}" for name in extra)
        return f"unknown config key {names}; known keys: {', '.join(known) or 'none'}"
    if error.validator == "required":
        return f"config key '{key}': {error.message}"
    if error.validator == "pattern" and "x-requirement" in error.schema:
        return (
            f"config key '{key}' = {_one_line(error.instance)}: must be "
            f"{error.schema['x-requirement']}"
        )
    if error.validator == "enum":
        choices = ", ".join(str(choice) for choice in error.validator_value)
        return f"config key '{key}' = {_one_line(error.instance)}: must be one of {choices}"
    hint = _number_hint(error.instance, error.validator_value) if error.validator == "type" else ""
    return f"config key '{key}' = {_one_line(error.instance)}: {error.message}{hint}"


def _suggest_key(error: Any, name: str) -> str:
    """`_did_you_mean` for the unknown key `name` of an additionalProperties `error`; at the
    top level, a key close to none there but close to a base key is meant under `base`."""
    key = _key_path(error.absolute_path)
    properties = error.schema.get("properties", {})
    if key != "<config>":
        return _did_you_mean(name, properties, f"{key}.")
    base = properties.get("base", {}).get("properties", {})
    return _did_you_mean(name, properties) or _did_you_mean(name, base, "base.")


def _workflow_message(message: str, workflow_config: Mapping[str, Any], env: str, algo: str) -> str:
    """Name a run-config error (``key=value: why``) by its key in the workflow config."""
    match = re.match(r"([\w.]+)=(.*?): (.*)", message)
    if match is None:
        return f"config for env {env}, algo {algo}: {message}"
    key, value, why = match.groups()
    tunable = {name for section in SECTIONS.values() for name in section.tunable_names()}
    if key == "n_agents":
        path = f"env_params.{env}.n_agents"
    elif key in ("wandb_project", "wandb_mode"):
        path = f"wandb.{key.removeprefix('wandb_')}"
    elif key in ("num_runs", "experiment_tag", "threads", "checkpoint_every"):
        path = key
    elif key in BASE_CHECKS or key in workflow_config.get("base", {}):
        path = f"base.{key}"
    elif key == "algo_params":
        path = f"algo_params.{algo}"
    elif key in tunable:
        path = f"algo_params.{algo}.{key}"
    elif key.startswith("env_params."):
        path = f"env_params.{env}.{key.removeprefix('env_params.')}"
    else:
        path = key
    return f"config key '{path}' = {value}: {why} (env {env}, algo {algo})"


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


def results_folder(config: Mapping[str, Any]) -> Path:
    """`{results_dir}/{experiment_tag}` of a validated config, absolute and resolved."""
    return Path(os.path.abspath(config["results_dir"])).joinpath(config["experiment_tag"]).resolve()


def _check_results_location(config: Mapping[str, Any]) -> None:
    """A results folder is never a place code is imported from: it may not be or contain the
    checkout or a folder on the Python path, its parent may not be such a folder (the
    experiment folder would be importable as a top-level package, shadowing an installed one
    of its name), and it may not lie inside the Python installation."""
    where = f"config key 'results_dir' = {_one_line(config['results_dir'])}"
    results = results_folder(config)
    parent = results.parent
    for folder in import_folders(REPOSITORY):
        if folder == results or folder.is_relative_to(results):
            raise WorkflowConfigError(
                f"{where}: the results folder {results} is or contains {folder}, a folder "
                "code is imported from; give results a folder of their own (e.g. results/)"
            )
        if folder == parent:
            raise WorkflowConfigError(
                f"{where}: {parent} is a folder code is imported from, so the results folder "
                f"{results} would be importable as the package "
                f"{config['experiment_tag']!r}; use a sub-folder of it (e.g. results/)"
            )
    for folder in installed_folders():
        if results.is_relative_to(folder):
            raise WorkflowConfigError(
                f"{where}: the results folder {results} lies inside {folder}, where Python's "
                "installed packages live"
            )


def _check_entries_outside_results(config: Mapping[str, Any]) -> None:
    """No module a config names (nor a package on its way) is found inside the results
    folder: resolved to its files without importing anything (`src.custom.module_files`)."""
    results = results_folder(config)
    for key, entry in config_entries(config):
        module = entry.split(":", 1)[0]
        found = [
            path
            for path in module_files(module)
            if Path(os.path.abspath(path)).resolve().is_relative_to(results)
        ]
        if found:
            # The deepest file (the module itself, else a package's __init__.py on the way),
            # else the deepest package folder.
            files = [path for path in found if not path.is_dir()]
            file = (files or found)[-1]
            raise WorkflowConfigError(
                f"config key '{key}' = {_one_line(entry)}: module {module!r} is found at "
                f"{file}, inside the results folder {results}; a config names code to "
                "import, never code from a results folder"
            )


def _register_components(config: Mapping[str, Any], *, load: bool) -> None:
    """Register the config's `custom_envs` and `custom_algos` in this process; with `load`,
    import each factory, cost function and algorithm class and check what it provides."""
    from src.algos.registry import ALGORITHMS, get_algorithm
    from src.envs.registry import ENVS
    from src.envs.task import check_entry

    for key, built_in, kind in (
        ("custom_envs", ENVS, "env"),
        ("custom_algos", ALGORITHMS, "algorithm"),
    ):
        for name, value in config[key].items():
            where = f"config key '{key}.{name}' = {_one_line(value)}"
            if name in built_in:
                raise WorkflowConfigError(
                    f"{where}: {name!r} is a built-in {kind}; give yours another name"
                )
            try:
                if kind == "env":
                    entry = EnvEntry.from_config(value)
                    register_env(name, entry.factory, entry.cost, entry.vector)
                    if load:
                        check_entry(entry)
                else:
                    register_algorithm(name, value)
                    if load:
                        get_algorithm(name)
            except ComponentError as error:
                raise WorkflowConfigError(f"{where}: {error}") from None


def _check_names(config: Mapping[str, Any]) -> None:
    """Env and algorithm names against the built-in ones and the config's own (never against
    what else this process registered: jobs know only the config); every env needs its
    env_params."""
    from src.algos.registry import ALGORITHMS
    from src.envs.registry import ENVS

    envs = sorted({*ENVS, *config["custom_envs"]})
    algos = sorted({*ALGORITHMS, *config["custom_algos"]})
    for key, known in (("envs", envs), ("algos", algos)):
        for index, name in enumerate(config[key]):
            if name not in known:
                raise WorkflowConfigError(
                    f"config key '{key}[{index}]' = {_one_line(name)}: must be one of "
                    f"{', '.join(known)} (or a name given under custom_{key})"
                    f"{_meant(name, known)}"
                )
    for env in config["envs"]:
        if env not in config["env_params"]:
            raise WorkflowConfigError(
                f"config key 'env_params.{env}' is missing: every env in 'envs' needs its "
                "parameters (at least n_agents)"
            )
    for env in config["env_params"]:
        if env not in envs:
            raise WorkflowConfigError(
                f"config key 'env_params.{env}': unknown env (known: {', '.join(envs)})"
                f"{_meant(env, envs, 'env_params.')}"
            )
    for algo in config["algo_params"]:
        if algo not in algos:
            raise WorkflowConfigError(
                f"config key 'algo_params.{algo}': unknown algo ({', '.join(algos)})"
                f"{_meant(algo, algos, 'algo_params.')}"
            )


def validate_workflow_config(
    config: dict,
    schema_path: str | Path = SCHEMA_PATH,
    *,
    load_components: bool = True,
    results_check: Callable[[Mapping[str, Any]], None] | None = None,
) -> dict:
    """Validate `config` against the workflow schema and fill its defaults in place.

    Registers the config's `custom_envs` and `custom_algos` (with `load_components`, their
    code is imported and checked: a factory or class that cannot be imported or lacks what the
    pipeline needs is refused here). Returns `config`. Raises `WorkflowConfigError` (one line
    naming the key and the value) for the first problem found, e.g. ``config key
    'base.num_envs' = 0: ...``, for unknown env or algorithm names and for an env in `envs`
    without an `env_params` entry.

    Before anything the config names is registered or imported, the results folder is
    checked: its place (`results_dir`: not a folder code is imported from, nor inside the
    Python installation), then `results_check(config)` if given (the workflow's check of the
    folder's contents), then every import path of `custom_envs` and `custom_algos`, resolved
    to its files without importing it, must lie outside the results folder.
    """
    from jsonschema.exceptions import best_match

    # First: everything below walks the config, which would expand an alias bomb.
    check_config_size(config)
    if not isinstance(config, dict):
        raise WorkflowConfigError(f"the config must be a mapping, got {_one_line(config)}")
    with open(schema_path, encoding="utf-8") as handle:
        schema = yaml.safe_load(handle)
    validator = _validator_with_defaults(schema)
    error = best_match(validator.iter_errors(config))
    if error is not None:
        raise WorkflowConfigError(_schema_message(error))
    _check_results_location(config)
    if results_check is not None:
        results_check(config)
    _check_entries_outside_results(config)
    # Base-config keys are checked by their one rule (src.config.base), here key by key so
    # that the message names them as written in the YAML.
    values = [("num_runs", "num_runs", config["num_runs"])]
    values += [(f"base.{key}", key, value) for key, value in config["base"].items()]
    for path, key, value in values:
        try:
            if key in OPTIONAL_CHECKS:
                check_optional_value(key, value)
            else:
                check_base_value(key, value)
        except ConfigError as problem:
            why = str(problem).split(": ", 1)[-1]
            raise WorkflowConfigError(f"config key '{path}' = {_one_line(value)}: {why}") from None
    _register_components(config, load=load_components)
    _check_names(config)
    _check_render_seeds(config)
    return config


def _check_render_seeds(config: Mapping[str, Any]) -> None:
    """Rendered episode i of run r is seeded like its evaluation episode i: the largest must
    fit too (the evaluation's own episodes are checked with the base config,
    `src.config.base`)."""
    offset = config["base"].get("final_policy_eval_seed_offset", 0)
    per_run = config["base"].get("final_policy_eval_episodes", 0)
    episodes = config["render"]["episodes"]
    top = offset + (config["num_runs"] - 1) * per_run + episodes - 1
    if top > SEED_MAX:
        raise WorkflowConfigError(
            f"config key 'base.final_policy_eval_seed_offset' = {offset}: its largest seed "
            f"for the videos, final_policy_eval_seed_offset + (num_runs - 1) * "
            f"final_policy_eval_episodes + (render.episodes - 1) = {top}, must be at most "
            f"{SEED_MAX} (2**32 - 1)"
        )


def resolve_run_config(
    workflow_config: Mapping[str, Any], env: str, algo: str, run_idx: int
) -> RunConfig:
    """The checked RunConfig of one run of a validated workflow config.

    The base config is `create_base_config` for `env` with the shared `base` values, the
    env's `n_agents`, `num_runs`, `experiment_tag` and the wandb settings (`wandb_project`,
    `wandb_mode`, read by `start_run`); the run keys are `algo`, `run_idx`, `seed`
    (= `seed_offset + run_idx`), `env_params` (the workflow's env_params of `env` without
    `n_agents`), `algo_params`, `threads` and `checkpoint_every`. Raises
    `WorkflowConfigError` naming the env, algorithm and bad key.
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
    env_params = dict(workflow_config["env_params"][env])
    # n_agents is a base-config value (create_base_config); env_params holds the env's own rest.
    n_agents = env_params.pop("n_agents")
    flat = {
        **base,
        "env_name": env,
        "n_agents": n_agents,
        "num_runs": workflow_config["num_runs"],
        "experiment_tag": workflow_config["experiment_tag"],
        "wandb_project": workflow_config["wandb"]["project"],
        "wandb_mode": workflow_config["wandb"]["mode"],
        "algo": algo,
        "run_idx": run_idx,
        "seed": base.get("seed_offset", 0) + run_idx,
        "env_params": env_params,
        "algo_params": dict(workflow_config["algo_params"].get(algo, {})),
        "threads": workflow_config["threads"],
        "checkpoint_every": workflow_config["checkpoint_every"],
    }
    if "constraint_horizon" not in base:
        flat["constraint_horizon"] = episode_cap(workflow_config, env)
    if workflow_config.get("joint_certificates") and algo in certificate_algos(workflow_config):
        if "certificate_family" in flat["algo_params"]:
            raise WorkflowConfigError(
                f"config key 'algo_params.{algo}.certificate_family' = "
                f"{_one_line(flat['algo_params']['certificate_family'])}: "
                "`joint_certificates: true` sets it (to the experiment's number of "
                "certificates); remove one of the two"
            )
        flat["algo_params"]["certificate_family"] = certificate_count(workflow_config)
    custom = recorded_entries(env, algo)
    if custom:
        flat["custom"] = custom
    try:
        return RunConfig.from_dict(flat)
    except ConfigError as error:
        message = _workflow_message(str(error), workflow_config, env, algo)
        raise WorkflowConfigError(message) from None


def certificate_algos(workflow_config: Mapping[str, Any]) -> list[str]:
    """The config's shielded algorithms whose runs test an allowance (`calibration_episodes`
    > 0 in their algo_params, or by the shield's default)."""
    from src.algos.registry import get_algorithm

    default = ShieldConfig.calibration_episodes
    return [
        algo
        for algo in workflow_config["algos"]
        if get_algorithm(algo).shielded
        and workflow_config["algo_params"].get(algo, {}).get("calibration_episodes", default) > 0
    ]


def certificate_count(workflow_config: Mapping[str, Any]) -> int:
    """The experiment's certificates: one per run of `certificate_algos` on every env, the N
    that `joint_certificates` shares `shield_credible_delta` between."""
    envs, runs = len(workflow_config["envs"]), workflow_config["num_runs"]
    return len(certificate_algos(workflow_config)) * envs * runs


def iter_runs(workflow_config: Mapping[str, Any]) -> Iterator[tuple[str, str, int]]:
    """Yield (env, algo, run_idx) of every training run, in a fixed order."""
    for env in workflow_config["envs"]:
        for algo in workflow_config["algos"]:
            for run_idx in range(workflow_config["num_runs"]):
                yield env, algo, run_idx


def episode_cap(config: Mapping[str, Any], env: str) -> int:
    """The episode cap `max_steps` of `env` with its `env_params`: the parameter when the
    config sets it, else the env's own (built once per process and parameters)."""
    params = config["env_params"][env]
    if "max_steps" in params:
        return int(params["max_steps"])
    custom = config["custom_envs"].get(env)
    with _env_params_errors(env, custom):
        return _built_cap(env, json.dumps(params, sort_keys=True), _one_line(custom))


@functools.cache
def _built_cap(env: str, params: str, custom: str) -> int:
    """`episode_cap` of an env whose config leaves `max_steps` to the env (`custom`: the
    task's import path, part of the cache key)."""
    from src.envs.registry import make_vector_env

    vector = make_vector_env(env, num_envs=1, **json.loads(params))
    try:
        return int(vector.max_steps)
    finally:
        vector.close()


@contextlib.contextmanager
def _env_params_errors(env: str, custom: Any) -> Iterator[None]:
    """Building `env` inside: its constructor's refusal as one line naming the config key
    (`custom_envs.{env}` for a task that cannot be loaded, else `env_params.{env}`)."""
    try:
        yield
    except ComponentError as error:
        raise WorkflowConfigError(
            f"config key 'custom_envs.{env}' = {_one_line(custom)}: {error}"
        ) from None
    except (TypeError, ValueError) as error:
        message = " ".join(str(error).split())
        raise WorkflowConfigError(
            f"config key 'env_params.{env}': {message}{_unknown_params_hint(message, env)}"
        ) from None


def _unknown_params_hint(message: str, env: str) -> str:
    """`; did you mean ...?` for the env's refusal of unknown parameters (`message` as
    `src.envs.registry.make_config` words it) that are close to known ones."""
    match = re.search(r"unknown parameters \[(.*?)\] .*; known parameters: (.*)$", message)
    if match is None:
        return ""
    known = [name.strip() for name in match.group(2).split(",")]
    unknown = [name.strip(" '\"") for name in match.group(1).split(",")]
    meant = [
        f"'env_params.{env}.{close}'" + (f" for '{name}'" if len(unknown) > 1 else "")
        for name in unknown
        if (close := _close_match(name, known)) is not None
    ]
    return f"; did you mean {', '.join(meant)}?" if meant else ""


def _check_env_params(config: Mapping[str, Any], env: str) -> tuple[int, int, int, str]:
    """Build the env once so its constructor checks its parameters (a task given by import
    path also runs through an episode, and its agents must share one action space: a team of
    Discrete and Box agents is refused naming two of them); (obs_dim, n_actions, cap, action
    kind)."""
    from src.algos.actions import shared_action_space
    from src.envs.registry import make_env, make_vector_env
    from src.envs.task import probe_task

    params = config["env_params"][env]
    with _env_params_errors(env, config["custom_envs"].get(env)):
        parallel = make_env(env, **params)
        try:
            team = {agent: parallel.action_space(agent) for agent in parallel.possible_agents}
        finally:
            parallel.close()
        vector = make_vector_env(env, num_envs=1, **params)
        if env in config["custom_envs"]:
            probe_task(vector)
            # A task's own VectorEnv is not checked against the agents' spaces otherwise.
            shared_action_space(team, env=env)
    # Built-in spread with continuous_actions has Box actions too.
    kind = "box" if getattr(vector, "continuous_actions", False) else "discrete"
    shape = (int(vector.obs_dim), int(vector.n_actions), int(vector.max_steps), kind)
    vector.close()
    return shape


def _check_run(
    config: Mapping[str, Any],
    run: RunConfig,
    obs_dim: int,
    n_actions: int,
    max_steps: int,
    kind: str = "discrete",
) -> None:
    """Refuse a run the env cannot serve: a shield setting the env cannot meet, or a job
    whose estimated peak memory exceeds the memory it asks for (the env's actions are checked
    for every run at once by `_check_action_kinds`)."""
    from src.resources import eval_memory_mb, train_memory_mb

    _check_constraint_horizon(config, run, max_steps)
    if run.shield is not None:
        try:
            run.shield.check_against(
                n_agents=run.env.n_agents,
                max_steps=max_steps,
                box=kind == "box",
            )
        except ConfigError as error:
            message = _workflow_message(str(error), config, run.env_name, run.algo)
            raise WorkflowConfigError(message) from None
        _check_calibration_seeds(config, run)
    for stage, parts in (
        ("train", train_memory_mb(run, obs_dim=obs_dim, n_actions=n_actions, box=kind == "box")),
        ("evaluate", eval_memory_mb(run, obs_dim=obs_dim, n_actions=n_actions, box=kind == "box")),
    ):
        granted = config["resources"][stage]["mem_mb"]
        if parts["total"] > granted:
            biggest = max((k for k in parts if k != "total"), key=lambda k: parts[k])
            raise WorkflowConfigError(
                f"config key 'resources.{stage}.mem_mb' = {granted}: the {stage} job of "
                f"{run.algo} on {run.env_name} needs about {parts['total']:.0f} MB (largest "
                f"part: {biggest}, {parts[biggest]:.0f} MB); raise mem_mb or shrink the config"
            )


def _check_action_kinds(config: Mapping[str, Any], kinds: Mapping[str, str]) -> None:
    """Refuse, in one line, every algorithm of the config that cannot take the actions of an
    env (`kinds`: env -> its action kind), for every env, saying how to go on."""
    from src.algos.registry import ACTION_KINDS, ALGORITHMS, get_algorithm

    algos = list(config["algos"])
    refused: dict[str, list[str]] = {}  # env -> algorithms that cannot take its actions
    taken: set[str] = set()  # the action kinds those algorithms take
    for env, kind in kinds.items():
        for algo in algos:
            spec = get_algorithm(algo)
            if kind not in spec.action_kinds:
                refused.setdefault(env, []).append(algo)
                taken.update(spec.action_kinds)
    if not refused:
        return
    names = sorted({algo for group in refused.values() for algo in group}, key=algos.index)
    if len(names) == 1:
        where = f"config key 'algos[{algos.index(names[0])}]' = {names[0]!r}: "
    else:
        where = f"config key 'algos' = {_one_line(algos)}: "
    takes = " or ".join(kind for kind in ACTION_KINDS if kind in taken)
    # Envs of one action kind refusing the same algorithms are named together.
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for env, group in refused.items():
        grouped.setdefault((kinds[env], tuple(group)), []).append(env)
    parts = []
    for (kind, group), envs_of in grouped.items():
        subject = "" if len(names) == 1 else f"{_and(list(group))} "
        verb = "takes" if len(group) == 1 else "take"
        has = f"env {envs_of[0]} has" if len(envs_of) == 1 else f"envs {_and(envs_of)} have"
        parts.append(f"{subject}{verb} {takes} actions, and {has} {kind} actions")
    envs = "this env" if len(refused) == 1 else "these envs"
    target = "the env" if len(refused) == 1 else "the envs"
    if len(names) == 1:
        advice = f"leave it out for {envs} or give {target} the actions the algorithm takes"
    else:
        advice = f"leave them out for {envs} or give {target} the actions the algorithms take"
    advice += " (an env that needs other algorithms goes in a config of its own)"
    needed = sorted({kinds[env] for env in refused}, key=ACTION_KINDS.index)
    built_in = [name for name, spec in ALGORITHMS.items() if set(needed) <= set(spec.action_kinds)]
    others = (
        f"the built-in algorithms that take {' or '.join(needed)} actions are {_and(built_in)}"
        if built_in
        else f"no built-in algorithm takes {' or '.join(needed)} actions"
    )
    raise WorkflowConfigError(
        f"{where}{'; '.join(parts)}; {advice}; {others}, and an algorithm of your own "
        "(custom_algos) takes the actions its class declares in its class attribute "
        'action_kinds, e.g. action_kinds = ("discrete", "box")'
    )


def _and(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _check_constraint_horizon(config: Mapping[str, Any], run: RunConfig, max_steps: int) -> None:
    """The constraint horizon fits the episode and is one of the evaluated horizons (the
    results judge the constraint there, never at a shorter horizon)."""
    horizon = run.constraint_horizon or max_steps
    if "constraint_horizon" in config["base"]:
        what = f"base.constraint_horizon = {horizon}"
    else:
        what = f"{horizon}, the episode cap max_steps of env {run.env_name}"
    if horizon > max_steps:
        raise WorkflowConfigError(
            f"config key 'base.constraint_horizon' = {horizon}: at most the episode cap "
            f"max_steps = {max_steps} of env {run.env_name}"
        )
    horizons = run.evaluation.horizons
    if run.evaluation.episodes > 0 and horizon not in horizons:
        raise WorkflowConfigError(
            f"config key 'base.final_policy_eval_horizons' = {list(horizons)}: must include "
            f"the constraint horizon ({what}), where the results judge the constraint; add "
            "it, or set base.constraint_horizon to one of them"
        )


def _check_calibration_seeds(config: Mapping[str, Any], run: RunConfig) -> None:
    """The shield's calibration seeds (every run's) fit every RNG (whether they meet another
    use's is `_check_seed_uses`)."""
    shield, runs = run.shield, config["num_runs"]
    if shield is None or shield.calibration_episodes == 0:
        return
    first = shield.calibration_seed_offset
    last = first + runs * shield.calibration_episodes - 1
    if last > SEED_MAX:
        raise WorkflowConfigError(
            f"config key 'algo_params.{run.algo}.calibration_seed_offset' = {first}: its "
            "largest seed, calibration_seed_offset + num_runs * calibration_episodes - 1 = "
            f"{last}, must be at most {SEED_MAX} (2**32 - 1)"
        )


def _check_seed_uses(config: Mapping[str, Any], runs: Mapping[tuple[str, str], RunConfig]) -> None:
    """No two uses of reset seeds that make a claim share one, and none meets a reserved
    range (`src.seeds`): training copies, evaluation, videos, each shielded algorithm's
    calibration."""
    first = next(iter(runs.values()))
    calibration = {
        algo: (run.shield.calibration_seed_offset, run.shield.calibration_episodes)
        for (_, algo), run in runs.items()
        if run.shield is not None
    }
    problem = check_seed_uses(
        seed_offset=first.base["seed_offset"],
        num_runs=config["num_runs"],
        num_envs=first.ppo.num_envs,
        eval_offset=first.evaluation.final_policy_eval_seed_offset,
        eval_episodes=first.evaluation.episodes,
        video_episodes=config["render"]["episodes"],
        calibration=calibration,
    )
    if problem is not None:
        raise WorkflowConfigError(
            f"{problem}; move one of them (src/seeds.py lists every use and reserved range)"
        )


KNOB_READERS: dict[str, tuple[Callable[[RunConfig], bool], str]] = {
    "shield_opponent_mode": (
        lambda run: run.shield.coordination == "decentralised",
        "the decentralised shield (coordination: decentralised, e.g. shield_dec) only; the "
        "central shield judges the others' actual proposals",
    ),
    "om_version": (
        lambda run: run.shield.coordination == "decentralised",
        "the decentralised shield (coordination: decentralised, e.g. shield_dec) only; the "
        "central shield has no opponent model",
    ),
}
"""Shield knobs that only some shields read: key -> (whether a shielded run reads it, who
does). The knobs no shield decides by (`src.config.base.UNREAD_KEYS`) are refused off their
default by `create_base_config` itself."""


@functools.cache
def _base_defaults(schema_path: str) -> dict[str, Any]:
    """The schema's default of each base key."""
    with open(schema_path, encoding="utf-8") as handle:
        properties = yaml.safe_load(handle)["properties"]["base"]["properties"]
    return {key: spec["default"] for key, spec in properties.items() if "default" in spec}


def _check_knobs(
    config: Mapping[str, Any],
    runs: Mapping[tuple[str, str], RunConfig],
    defaults: Mapping[str, Any],
) -> None:
    """Every shield knob set has an effect: a base key off its default (`defaults`) that the
    experiment's shields ignore is refused, naming who would read it, and so is
    a shield that would never arm (`shield_patience` >= the run's policy updates). An
    experiment without shields is left alone (its shield keys wait for the shields)."""
    base = config["base"]
    shielded = [run for run in runs.values() if run.shield is not None]
    for key, (reads, who) in KNOB_READERS.items():
        if not shielded or key not in base or base[key] == defaults.get(key):
            continue
        if not any(reads(run) for run in shielded):
            raise WorkflowConfigError(
                f"config key 'base.{key}' = {_one_line(base[key])}: no shield of this "
                f"experiment reads it (read by {who}); leave it at its default "
                f"{_one_line(defaults.get(key))} or remove it"
            )
    for (env, algo), run in runs.items():
        if run.shield is None:
            continue
        updates = run.ppo.num_updates
        if run.shield.shield_patience >= updates:
            raise WorkflowConfigError(
                f"config key 'base.shield_patience' = {run.shield.shield_patience}: the shield "
                f"of {algo} on {env} would never arm; it must be less than the run's {updates} "
                "policy updates (timesteps / (num_envs * rollouts))"
            )


def check_workflow_config(
    config: dict,
    schema_path: str | Path = SCHEMA_PATH,
    *,
    check_components: bool = True,
    results_check: Callable[[Mapping[str, Any]], None] | None = None,
) -> dict:
    """Validate the workflow config completely before any job runs; fill defaults in place.

    The schema, names and base values first (`validate_workflow_config`), then the run config
    of every (env, algo) through `resolve_run_config` (cross-key rules, versions, algo_params:
    runs of one (env, algo) differ only in their index and seed), then, with
    `check_components`, each env's parameters through its constructor and each job's
    estimated peak memory against its `resources` (`src.resources`). Returns `config`;
    raises `WorkflowConfigError` with one line. `results_check`: see `validate_workflow_config`.
    """
    validate_workflow_config(
        config, schema_path, load_components=check_components, results_check=results_check
    )
    runs = {
        (env, algo): resolve_run_config(config, env, algo, 0)
        for env in config["envs"]
        for algo in config["algos"]
    }
    _check_seed_uses(config, runs)
    _check_knobs(config, runs, _base_defaults(str(schema_path)))
    if check_components:
        shapes = {env: _check_env_params(config, env) for env in config["envs"]}
        _check_action_kinds(config, {env: shape[3] for env, shape in shapes.items()})
        for (env, _), run in runs.items():
            _check_run(config, run, *shapes[env])
    return config
