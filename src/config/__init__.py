"""The experiment config: the workflow's YAML config and the typed config of each run.

- `base`: `create_base_config`, the validated base config (published as
  `src.core.wandb.create_base_config`), and the one rule of each of its keys;
- `ppo`, `lagrange`, `shield`, `evaluation`: the sections of a run config, one frozen
  dataclass each, the only place their hyperparameters are declared (`section`: what they
  share);
- `run`: `RunConfig` (typed, checked once when it is built: a new one by
  `RunConfig.from_dict`, a run's recording read back by `RunConfig.from_recorded`) and
  `make_run_config`;
- `workflow`: the workflow's YAML config (`check_workflow_config`, `resolve_run_config`).

Nothing is imported here: import from the submodule, so that a job loads only what it uses.
"""
