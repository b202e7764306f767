"""Config validation, the only copy of the results path templates, and target builders."""

import functools
import os
import sys
from pathlib import Path

# The workflow runs from a plain checkout (no `pip install -e .` needed): the repository root is
# importable here, and workflow/scripts/job.py puts it on the path of every job.
REPO = Path(workflow.basedir).resolve()
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from src.analysis.floor import floor_settings
from src.code_inputs import (
    FINGERPRINTS,
    code_listing,
    fingerprint_path,
    job_code,
    parse_code_name,
    write_fingerprint,
)
from src.containment import (
    ContainmentError,
    check_results_folder,
    check_results_links,
)
from src.config.workflow import (
    WorkflowConfigError,
    check_workflow_config,
    iter_runs,
    read_config_file,
    resolve_run_config,
)
from src.lock import LOCK_ENV_VAR, LockHeldError, ResultsLock, job_environment
from src.runfiles import RunFiles

# ---------------------------------------------------------------- the config
# Without --configfile the default experiment runs, with any --config values on top. A given
# --configfile replaces config/config.yaml instead of being merged into it (Snakemake's
# `configfile:` directive deep-merges, which would leak e.g. the default's env_params into
# another experiment).
if not workflow.overwrite_configfiles:
    from snakemake.utils import update_config

    try:
        # A YAML syntax error as one line: file:line:column and the problem.
        _default = read_config_file(REPO / "config" / "config.yaml")
    except WorkflowConfigError as error:
        print(f"invalid config: {error}", file=sys.stderr)
        sys.exit(1)
    update_config(_default, config)
    config.clear()
    config.update(_default)


# ---------------------------------------------------------------- nothing planted in the results
# The results folder may come from elsewhere (a shared scratch, a colleague's archive). Before
# Snakemake deletes, reruns or reports anything in it, and before anything the config names is
# imported: the folder is not reached through a symlink (unless results_symlink_ok), and holds
# no symlink and no FIFO, socket or device anywhere (wandb's own tree aside, see
# src/containment.py), or the workflow stops with one line naming the file. Jobs check their
# own paths again when they start (job.py).
def check_results(checked):
    """The main process's check of the results folder, run by the config's validation after
    the schema and before any module the config names is imported."""
    if workflow.is_main_process:
        check_results_links(
            checked["results_dir"],
            checked["experiment_tag"],
            allowed=checked["results_symlink_ok"],
        )
        check_results_folder(f"{checked['results_dir']}/{checked['experiment_tag']}")


# ---------------------------------------------------------------- validation, before any job
# The schema fills defaults into `config`; the results folder is checked (its place, what it
# holds, and that no module the config names lies inside it); every run config is then resolved
# once. Building the envs to check their parameters happens only in the main process, not again
# in every job.
try:
    check_workflow_config(
        config,
        REPO / "workflow" / "schemas" / "config.schema.yaml",
        check_components=workflow.is_main_process,
        results_check=check_results,
    )
except WorkflowConfigError as error:
    # One line naming the key and value, no traceback: the whole message is the diagnosis.
    print(f"invalid config: {error}", file=sys.stderr)
    sys.exit(1)
except ContainmentError as error:
    print(f"refused: {error}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- path templates
# The run folder's file names come from src/runfiles.py (RunFiles), the one place they live.
RESULTS = f"{config['results_dir']}/{config['experiment_tag']}"
RUN_DIR = f"{RESULTS}/runs/{{env}}/{{algo}}/run{{idx}}"
RUN = RunFiles.templates(RUN_DIR)
TABLES_DIR = f"{RESULTS}/tables"
# Files written by src.analysis.aggregate.aggregate (all runs concatenated).
TABLES = {
    f"{name}_{ext}": f"{TABLES_DIR}/{name}.{ext}"
    for name in ("eval", "history", "updates")
    for ext in ("parquet", "csv")
}
SUMMARY = {ext: f"{TABLES_DIR}/summary.{ext}" for ext in ("csv", "md", "tex")}
# Every run's training and evaluation episodes in marl-eval's JSON format (rule marl_eval).
MARL_EVAL = f"{TABLES_DIR}/marl_eval.json"
# The risk floor of each env (src.analysis.floor), shown next to max_risk in the summary.
FLOOR = f"{RESULTS}/floors/{{env}}.json"
FIGURES_DIR = f"{RESULTS}/figures"
VIDEO_PAGE_DIR = f"{RESULTS}/video_page"
WANDB_DIR = f"{RESULTS}/wandb"
WANDB_DONE = f"{WANDB_DIR}/upload.done"
ENVIRONMENT = "../../environment.yml"


# ---------------------------------------------------------------- a dry run that reads
# Snakemake prints a block of about 12 lines per job, 2,400 lines for a dry run of
# config/paper.yaml. A dry run without a --quiet choice of the user's prints its header, the job
# counts per rule and why they run. The job blocks are hidden as `--quiet rules` hides them, in
# the dry run's log filters only; a real run keeps every block, and the error block that names
# a failed job's rule and its log. Any --quiet choice is taken as given, and
# `snakemake -n --quiet host` lists every job.
def short_dry_run():
    """Hide the job blocks of a dry run in the main process unless --quiet was given."""
    settings = workflow.output_settings
    if not (workflow.is_main_process and settings.dryrun and settings.quiet is None):
        return
    from snakemake.logging import logger as snakemake_logger
    from snakemake.settings.enums import Quietness

    settings.quiet = {Quietness.RULES}
    for handler in snakemake_logger.handlers:
        for log_filter in handler.filters:
            if isinstance(getattr(log_filter, "quiet", None), set):
                log_filter.quiet.add(Quietness.RULES)
    snakemake_logger.info(
        "Dry run: the jobs per rule and why they run; every job's files, wildcards and "
        "resources: snakemake -n --quiet host"
    )


short_dry_run()


# ---------------------------------------------------------------- one workflow per results folder
# Snakemake locks its working directory only; two workflows started from different folders
# with the same results_dir would race on the same files. The results folder gets a lock of
# its own while jobs run (src/lock.py); a second workflow is refused in one line.
RESULTS_LOCK = ResultsLock(RESULTS)


onstart:
    try:
        RESULTS_LOCK.acquire()
    except LockHeldError as error:
        print(f"refused: {error}", file=sys.stderr)
        sys.exit(1)
    os.environ[LOCK_ENV_VAR] = job_environment(RESULTS_LOCK)


onsuccess:
    RESULTS_LOCK.release()


onerror:
    RESULTS_LOCK.release()


def run_log(stage):
    """Log file of one stage of one run."""
    return str(RunFiles(RUN_DIR).log(stage))


def run_benchmark(stage):
    """Benchmark file (time, memory) of one stage of one run."""
    return str(RunFiles(RUN_DIR).benchmark(stage))


def experiment_log(stage):
    """Log file of one experiment-level stage."""
    return f"{RESULTS}/logs/{stage}.log"


wildcard_constraints:
    env="|".join(config["envs"]),
    algo="|".join(config["algos"]),
    idx=r"\d+",


# ---------------------------------------------------------------- input helpers
# The code a job runs is one input: the fingerprint of its files (src/code_inputs.py), written by
# rule code_fingerprint (workflow/rules/code.smk), which alone takes the files as inputs.
CODE = f"{RESULTS}/{FINGERPRINTS}/{{name}}.sha256"


@functools.cache
def job_code_of(script, env=None, algo=None):
    """(name, files) of the code a job of workflow/scripts/{script}.py runs, with its env and
    algo wildcards (src.code_inputs.job_code)."""
    return job_code(
        REPO / "workflow" / "scripts" / f"{script}.py",
        envs=config["custom_envs"],
        algos=config["custom_algos"],
        env=env,
        algo=algo,
        root=REPO,
    )


def code_files(wildcards):
    """The files of the code named by the wildcards (`name`, made by job_code_of)."""
    _, files = job_code_of(*parse_code_name(wildcards.name))
    return [os.path.relpath(path) for path in files]


def script_code(script):
    """The code a rule's script runs (workflow/scripts/{script}.py and its import closure,
    plus the modules of the tasks and algorithms given by import path, and the built-in
    algorithms' own modules, that its code reaches: only the job's own env and algo for a
    per-run job) as one input, its fingerprint, so
    that changing a module reruns exactly the jobs that run it."""

    def code(wildcards):
        name, _ = job_code_of(script, wildcards.get("env"), wildcards.get("algo"))
        return f"{RESULTS}/{fingerprint_path(name)}"

    return code


def run_config(wildcards):
    """The resolved config of the run named by the wildcards, in its flat (JSON) form."""
    return resolve_run_config(
        config, wildcards.env, wildcards.algo, int(wildcards.idx)
    ).to_dict()


def floor_config(wildcards):
    """The witness floor's settings of the env named by the wildcards."""
    return floor_settings(config, wildcards.env)


def all_envs(template):
    """`template` filled in for every env of the config."""
    return [template.format(env=env) for env in config["envs"]]


def all_runs(template):
    """`template` filled in for every (env, algo, run) of the config."""
    return [
        template.format(env=env, algo=algo, idx=idx)
        for env, algo, idx in iter_runs(config)
    ]


def final_targets():
    """Everything `rule all` builds."""
    return [
        *SUMMARY.values(),
        MARL_EVAL,
        *all_runs(RUN["certificate"]),
        FIGURES_DIR,
        VIDEO_PAGE_DIR,
        WANDB_DONE,
    ]
