"""Nothing planted in a results folder reaches outside it.

Each test plants one thing an attacker who can write into a results folder might leave there
and runs the code path that used to follow it: a checkpoint folder that is a symlink to a
folder outside (training deleted its sub-folders), a wandb manifest entry naming a folder
outside (the upload deleted it), a video that is a symlink to `/dev/zero` (the video page
copied it until the disk was full), archives whose members inflate far beyond the job's memory,
a YAML alias bomb in the config, a seed offset no RNG accepts, and two workflows taking over
the same stale lock at once. Each must end in one line naming the file and what is wrong,
with nothing outside the folder deleted, nothing filled and nothing inflated past the limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from src.algos.train import train_run
from src.containment import ContainmentError
from tests.reliability.helpers import checkpoint_after_two_updates, folder_state
from tests.tiny_runs import four_update_config


def _one_line_naming(error: BaseException | str, path: Path) -> str:
    message = str(error)
    assert "\n" not in message.strip(), message
    assert str(path) in message, f"the message does not name {path}: {message}"
    assert "weights_only=False" not in message and "trust" not in message, message
    return message


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every results folder, with sub-folders and files to lose."""
    folder = tmp_path / "outside"
    for name in ("precious", "update-000009", "wandb"):
        (folder / name).mkdir(parents=True)
        (folder / name / "data.txt").write_text(f"{name} must survive")
    (folder / "update-000009" / "complete.json").write_text('{"update": 9}')
    return folder


def _intact(outside: Path, before: dict[str, bytes]) -> None:
    assert folder_state(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["precious", "update-000009", "wandb"]


# ------------------------------------------------------------- 1. checkpoint symlink


def _tiny_config() -> dict[str, Any]:
    return four_update_config()


@pytest.fixture
def checkpointed(tmp_path: Path) -> Path:
    """A run folder holding a complete checkpoint after update 2 and no policy yet."""
    return checkpoint_after_two_updates(
        _tiny_config(), tmp_path / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0"
    )


def test_a_checkpoint_symlinked_outside_is_refused_and_nothing_deleted(
    tmp_path: Path, outside: Path
):
    run_dir = tmp_path / "results" / "test" / "runs" / "hazard_grid" / "ippo" / "run0"
    run_dir.mkdir(parents=True)
    link = run_dir / "checkpoint"
    link.symlink_to(outside, target_is_directory=True)
    before = folder_state(outside)

    with pytest.raises(ContainmentError) as error:
        train_run(_tiny_config(), run_dir, progress=False)

    message = _one_line_naming(error.value, link)
    assert "symbolic link" in message
    _intact(outside, before)
    assert link.is_symlink() and not (run_dir / "policy.pt").exists()


def test_a_symlink_inside_the_checkpoint_folder_is_refused(checkpointed: Path, outside: Path):
    link = checkpointed / "checkpoint" / "update-000001"
    link.symlink_to(outside / "update-000009", target_is_directory=True)
    before = folder_state(outside)

    with pytest.raises(ContainmentError) as error:
        train_run(_tiny_config(), checkpointed, progress=False)

    _one_line_naming(error.value, link)
    _intact(outside, before)
    assert not (checkpointed / "policy.pt").exists()


def test_an_intact_checkpoint_still_resumes_and_is_removed(checkpointed: Path):
    train_run(_tiny_config(), checkpointed, progress=False)
    assert (checkpointed / "policy.pt").is_file() and not (checkpointed / "checkpoint").exists()


# ------------------------------------------------------------- 2. wandb manifest


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A results folder (`results/test`) of one finished run, ready for the wandb upload."""
    import pandas as pd

    from src.config.workflow import resolve_run_config, validate_workflow_config
    from src.core.io import save_to_file

    workflow_config = validate_workflow_config(
        {
            "experiment_tag": "test",
            "envs": ["hazard_grid"],
            "algos": ["ippo"],
            "num_runs": 1,
            "base": {"num_envs": 2, "timesteps": 64, "rollouts": 16, "mini_batches": 2},
            "env_params": {"hazard_grid": {"n_agents": 2, "max_steps": 20}},
        }
    )
    results = tmp_path / "results" / "test"
    run_dir = results / "runs" / "hazard_grid" / "ippo" / "run0"
    config = resolve_run_config(workflow_config, "hazard_grid", "ippo", 0).to_dict()
    save_to_file(config, run_dir, "config.json")
    save_to_file([], run_dir, "history.json")
    save_to_file([], run_dir, "updates.json")
    save_to_file(pd.DataFrame({"horizon": [10], "p_violation": [0.1]}), run_dir, "eval.parquet")
    (run_dir / "videos").mkdir()
    return results


def _plant_manifest(results: Path, folder: str) -> Path:
    """A manifest whose entry for the run names `folder`, with a stale fingerprint and never
    synced: the upload would delete that folder to make a new offline run."""
    import json

    wandb_dir = results / "wandb"
    wandb_dir.mkdir(exist_ok=True)
    manifest = wandb_dir / "manifest.json"
    entry = {"fingerprint": "stale", "folder": folder, "synced": False}
    manifest.write_text(json.dumps({"hazard_grid-ippo-run0": entry}))
    (wandb_dir / "upload.done").unlink(missing_ok=True)
    return manifest


@pytest.mark.parametrize(
    "kind", ["absolute", "climbing", "climbing inside wandb/", "wandb folder itself", "symlink"]
)
def test_a_manifest_folder_outside_is_refused_and_nothing_deleted(
    finished: Path, outside: Path, kind: str, monkeypatch: pytest.MonkeyPatch
):
    from src.analysis.wandb_upload import upload_experiment

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(finished / "no.netrc"))
    if kind == "symlink":
        (finished / "wandb" / "wandb").mkdir(parents=True)
        (finished / "wandb" / "wandb" / "offline-run-x").symlink_to(outside / "precious")
    folder = {
        "absolute": str(outside / "precious"),
        "climbing": "../../../outside/precious",
        "climbing inside wandb/": "wandb/../../../../outside/precious",
        "wandb folder itself": "wandb",
        "symlink": "wandb/offline-run-x",
    }[kind]
    manifest = _plant_manifest(finished, folder)
    before = folder_state(outside)

    with pytest.raises(ContainmentError) as error:
        upload_experiment(finished, sync=False)

    message = _one_line_naming(error.value, manifest)
    assert repr(folder) in message
    _intact(outside, before)
    assert not (finished / "wandb" / "upload.done").exists()


# ------------------------------------------------------------- 3. special files as videos

# A child process, so that a regression (copying /dev/zero endlessly) hits a file size limit
# and a timeout instead of filling the disk.
LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
try:
    exec(sys.argv[1])
except Exception as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(3)
"""


def _run_limited(code: str, *args: str, timeout: float = 120) -> str:
    """Run `code` (with `sys.argv[2:]` = args) in a child with the file size capped at 16 MB
    and its memory at 4 GB; returns the one line of the error it ended with."""
    import subprocess
    import sys

    from tests.reliability.helpers import child_env

    done = subprocess.run(
        [sys.executable, "-c", LIMITED, code, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
    )
    assert done.returncode == 3, f"not refused: {done.returncode} {done.stdout} {done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    return lines[0]


def _videos(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "episode-0.mp4").write_bytes(b"a real video")
    (folder / "poster.png").write_bytes(b"a real poster")
    return folder


PAGE = """
import sys
from src.analysis.video_page import write_video_page
write_video_page(sys.argv[2:-1], ["x"] * len(sys.argv[2:-1]), sys.argv[-1], title="T")
"""


@pytest.mark.parametrize("name", ["episode-1.mp4", "poster.png"])
def test_a_video_symlinked_to_dev_zero_is_refused_and_nothing_copied(tmp_path: Path, name: str):
    videos = _videos(tmp_path / "results" / "test" / "runs" / "e" / "a" / "run0" / "videos")
    planted = videos / name
    planted.unlink(missing_ok=True)
    planted.symlink_to("/dev/zero")
    page = tmp_path / "results" / "test" / "video_page"

    line = _run_limited(PAGE, str(videos), str(page))

    assert line.startswith("ContainmentError: ") and "symbolic link" in line
    _one_line_naming(line, planted)
    # Nothing copied: no page, no staging folder beside it.
    assert sorted(p.name for p in page.parent.iterdir()) == ["runs"]


def test_a_fifo_as_a_video_is_refused(tmp_path: Path):
    import os

    from src.analysis.video_page import write_video_page

    videos = _videos(tmp_path / "videos")
    fifo = videos / "episode-1.mp4"
    os.mkfifo(fifo)
    with pytest.raises(ContainmentError, match="FIFO") as error:
        write_video_page([videos], ["x"], tmp_path / "page", title="T")
    _one_line_naming(error.value, fifo)
    assert not (tmp_path / "page").exists()


def test_a_video_folder_symlinked_outside_is_refused(tmp_path: Path, outside: Path):
    from src.analysis.video_page import write_video_page

    _videos(outside / "videos")
    link = tmp_path / "videos"
    link.symlink_to(outside / "videos", target_is_directory=True)
    with pytest.raises(ContainmentError) as error:
        write_video_page([link], ["x"], tmp_path / "page", title="T")
    _one_line_naming(error.value, link)
    assert not (tmp_path / "page").exists()


def test_a_video_page_folder_symlinked_outside_is_not_deleted(tmp_path: Path, outside: Path):
    from src.analysis.video_page import write_video_page

    videos = _videos(tmp_path / "videos")
    page = tmp_path / "page"
    page.symlink_to(outside, target_is_directory=True)
    before = folder_state(outside)
    with pytest.raises(ContainmentError) as error:
        write_video_page([videos], ["x"], page, title="T")
    _one_line_naming(error.value, page)
    _intact(outside, before)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".page")] == []


UPLOAD = """
import sys
from src.analysis.wandb_upload import upload_experiment
upload_experiment(sys.argv[2], sync=False)
"""


def test_a_video_symlinked_to_dev_zero_is_not_given_to_wandb(finished: Path):
    planted = finished / "runs" / "hazard_grid" / "ippo" / "run0" / "videos" / "e.mp4"
    planted.symlink_to("/dev/zero")

    line = _run_limited(UPLOAD, str(finished))

    assert line.startswith("ContainmentError: ")
    _one_line_naming(line, planted)
    assert not (finished / "wandb").exists()


# ------------------------------------------------------------- the workflow refuses at once


def _snakemake(workdir: Path, config: Path, *args: str) -> Any:
    import subprocess
    import sys

    from tests.reliability.helpers import REPO, child_env

    snakemake = Path(sys.executable).with_name("snakemake")
    command = [str(snakemake), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    return subprocess.run(
        [*command, "--configfile", str(config), *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )


@pytest.fixture
def workflow_folder(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(working directory, config file, results folder) of `.test/config.yaml` in tmp_path."""
    import yaml

    from tests.reliability.helpers import REPO

    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text(encoding="utf-8"))
    config["results_dir"] = str(tmp_path / "results")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    workdir = tmp_path / "work"
    workdir.mkdir()
    return workdir, config_path, tmp_path / "results" / "test"


PLANTS = {
    # name: (path under the results folder, what it points to: "outside" or a device)
    "checkpoint symlinked outside": ("runs/hazard_grid/ippo/run0/checkpoint", "outside"),
    "video symlinked to /dev/zero": ("runs/hazard_grid/ippo/run0/videos/e-0.mp4", "/dev/zero"),
    "log symlinked outside": ("runs/hazard_grid/ippo/run0/logs/train.log", "outside"),
    "figures symlinked outside": ("figures", "outside"),
}


@pytest.mark.parametrize("mode", ["run", "report"])
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_the_workflow_refuses_a_planted_link_before_anything_runs(
    workflow_folder: tuple[Path, Path, Path], outside: Path, name: str, mode: str
):
    workdir, config, results = workflow_folder
    relative, target = PLANTS[name]
    planted = results / relative
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(outside if target == "outside" else target)
    before = folder_state(outside)
    args = ["--cores", "1"] if mode == "run" else ["--report", str(results / "report.zip")]

    done = _snakemake(workdir, config, *args)

    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("refused:")]
    assert "symbolic link" in _one_line_naming(line, planted)
    _intact(outside, before)
    assert not (results / "report.zip").exists() and not (results / ".lock").exists()
    assert not (results / "runs" / "hazard_grid" / "ippo" / "run0" / "policy.pt").exists()


def test_the_workflow_refuses_a_fifo_in_the_results_folder(
    workflow_folder: tuple[Path, Path, Path],
):
    import os

    workdir, config, results = workflow_folder
    fifo = results / "tables" / "eval.parquet"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    done = _snakemake(workdir, config, "-n")
    assert done.returncode != 0
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("refused:")]
    assert "FIFO" in _one_line_naming(line, fifo)


# ------------------------------------------------------------- jobs check their own paths


class _Job:
    """The parts of Snakemake's `snakemake` object that `start_job` reads."""

    def __init__(self, results: Path, *, inputs: list[Path], mem_mb: int | None = 1000) -> None:
        from types import SimpleNamespace

        self.config = {"results_dir": str(results.parent), "experiment_tag": results.name}
        self.input = [str(path) for path in inputs]
        self.output = [str(results / "tables" / "out.csv")]
        self.log = [str(results / "logs" / "job.log")]
        self.resources = SimpleNamespace(mem_mb=mem_mb)


@pytest.fixture
def job_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """workflow/scripts/job.py, imported as the scripts import it; its changes to the process
    (stdout, stderr, excepthook, logging, memory budget) are undone afterwards."""
    import importlib
    import sys

    from src import containment
    from src.core.logging import reset_logging
    from tests.reliability.helpers import REPO

    monkeypatch.syspath_prepend(str(REPO / "workflow" / "scripts"))
    for name in ("stdout", "stderr", "excepthook"):
        monkeypatch.setattr(sys, name, getattr(sys, name))
    monkeypatch.delenv("SAFE_MARL_RESULTS_LOCK", raising=False)
    yield importlib.import_module("job")
    reset_logging()
    containment.set_memory_budget(None)


def test_a_job_refuses_a_symlinked_input_in_one_line(
    job_module: Any, tmp_path: Path, outside: Path, capfd: pytest.CaptureFixture[str]
):
    results = tmp_path / "results" / "test"
    videos = results / "runs" / "e" / "a" / "run0" / "videos"
    videos.mkdir(parents=True)
    (videos / "e-0.mp4").symlink_to("/dev/zero")
    with pytest.raises(SystemExit):
        job_module.start_job(_Job(results, inputs=[videos]), console=False)
    err = capfd.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "refused:" in ln]
    _one_line_naming(line.split("refused: ", 1)[1], videos / "e-0.mp4")


def test_a_job_never_appends_to_a_planted_log_link(
    job_module: Any, tmp_path: Path, outside: Path, capfd: pytest.CaptureFixture[str]
):
    results = tmp_path / "results" / "test"
    (results / "logs").mkdir(parents=True)
    target = outside / "precious" / "data.txt"
    (results / "logs" / "job.log").symlink_to(target)
    with pytest.raises(SystemExit):
        job_module.start_job(_Job(results, inputs=[]))
    assert target.read_text() == "precious must survive"
    (line,) = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("refused:")]
    _one_line_naming(line, results / "logs" / "job.log")


def test_a_refusal_inside_a_job_ends_in_one_line_without_traceback(
    job_module: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
):
    import sys

    results = tmp_path / "results" / "test"
    job_module.start_job(_Job(results, inputs=[]))
    link = results / "runs" / "run0" / "checkpoint"
    try:
        raise ContainmentError(f"{link} is a symbolic link (to /elsewhere)", path=link)
    except ContainmentError as error:
        sys.excepthook(type(error), error, error.__traceback__)
    err = capfd.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "refused:" in ln]
    _one_line_naming(line, link)
    log = (results / "logs" / "job.log").read_text()
    assert "Traceback" not in log and str(link) in log


def test_a_job_bounds_archives_by_its_mem_mb(job_module: Any, tmp_path: Path):
    from src.containment import archive_limit

    results = tmp_path / "results" / "test"
    job_module.start_job(_Job(results, inputs=[], mem_mb=1000))
    assert archive_limit() == (500 * 1024**2, "half the job's mem_mb of 1000")
    job_module.start_job(_Job(results, inputs=[], mem_mb=None))
    assert "machine" in archive_limit()[1]


# ------------------------------------------------------------- 4. archive bombs

_MiB = 2**20


def _write_npz_bomb(path: Path, inflated_mb: int) -> Path:
    """An .npz of one float64 array of zeros that inflates to `inflated_mb` MiB from about a
    thousandth of that on disk (deflate)."""
    import zipfile

    import numpy as np

    size = inflated_mb * _MiB
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("a0.npy", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            header = {"descr": "<f8", "fortran_order": False, "shape": (size // 8,)}
            np.lib.format.write_array_header_2_0(member, header)
            chunk = bytes(4 * _MiB)
            for _ in range(size // len(chunk)):
                member.write(chunk)
    return path


def _write_pt_bomb(path: Path, inflated_mb: int) -> Path:
    """A torch file of one float32 tensor whose storage record, deflated, inflates to
    `inflated_mb` MiB: torch reads deflated records, so loading it would allocate all of it."""
    import zipfile

    import torch

    plain = path.with_name(f"plain-{path.name}")
    # torch.empty of this size is fresh mmap'ed memory: zeros that are never touched here.
    torch.save({"weights": torch.empty(inflated_mb * _MiB // 4)}, plain)
    with zipfile.ZipFile(plain) as original, zipfile.ZipFile(path, "w") as archive:
        for info in original.infolist():
            record = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            if info.file_size > _MiB:
                record.compress_type = zipfile.ZIP_DEFLATED
            with original.open(info) as source, archive.open(record, "w", force_zip64=True) as out:
                while chunk := source.read(4 * _MiB):
                    out.write(chunk)
    plain.unlink()
    return path


@pytest.fixture(scope="module")
def gigabyte_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1 MB arrays.npz whose member inflates to 1 GiB (made once: deflating takes seconds)."""
    return _write_npz_bomb(tmp_path_factory.mktemp("bomb") / "arrays.npz", 1024)


# In a fresh interpreter, so that its peak memory shows whether anything was inflated.
LOAD = """
import re, sys
from src.containment import set_memory_budget
from src.core.io import load_from_file
set_memory_budget(float(sys.argv[3]))
try:
    load_from_file(sys.argv[1], sys.argv[2])
except Exception as error:
    print(type(error).__name__, "|", error)
# The peak of this process's own memory (ru_maxrss would include the parent's before exec).
with open("/proc/self/status") as status:
    print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) // 1024)
"""


def _load_in_child(folder: Path, name: str, mem_mb: int) -> tuple[str, int]:
    """(error line, peak MB) of `load_from_file(folder, name)` in a job granted `mem_mb`."""
    import subprocess
    import sys

    from tests.reliability.helpers import child_env

    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder), name, str(mem_mb)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line, peak = done.stdout.strip().splitlines()
    return line, int(peak)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_an_archive_bomb_is_refused_before_inflating_with_the_sizes(tmp_path: Path, suffix: str):
    writer = _write_npz_bomb if suffix == ".npz" else _write_pt_bomb
    path = writer(tmp_path / f"state{suffix}", 512)
    assert path.stat().st_size < 4 * _MiB

    line, peak_mb = _load_in_child(tmp_path, path.name, mem_mb=1000)

    kind, message = line.split(" | ", 1)
    assert kind == "CorruptFileError"
    _one_line_naming(message, path)
    assert "512.0 MB" in message and "500.0 MB" in message and "1000" in message, message
    # Python, NumPy (and torch for .pt) take a few hundred MB; 512 MB more were not inflated.
    assert peak_mb < 450, peak_mb


def test_a_resumed_train_job_refuses_a_gigabyte_checkpoint_member(
    checkpointed: Path, gigabyte_npz: Path
):
    import shutil

    from src.containment import memory_budget
    from src.core.io import CorruptFileError

    (path,) = checkpointed.glob("checkpoint/update-*/arrays.npz")
    shutil.copyfile(gigabyte_npz, path)

    with memory_budget(1000), pytest.raises(CorruptFileError) as error:
        train_run(_tiny_config(), checkpointed, progress=False)

    message = _one_line_naming(error.value, path)
    assert "1024.0 MB" in message and "a0.npy" in message and "500.0 MB" in message
    assert not (checkpointed / "policy.pt").exists()


def test_archives_within_the_limit_still_load(tmp_path: Path):
    import numpy as np
    import torch

    from src.containment import memory_budget
    from src.core.io import load_from_file, save_to_file

    save_to_file({"a": np.zeros(1000)}, tmp_path, "x.npz")
    save_to_file({"w": torch.zeros(1000)}, tmp_path, "x.pt")
    with memory_budget(1):  # a limit of 0.5 MB: both hold 8 KB or less
        assert load_from_file(tmp_path, "x.npz")["a"].shape == (1000,)
        assert load_from_file(tmp_path, "x.pt")["w"].shape == (1000,)


def test_a_refused_pt_names_the_file_without_advice_to_turn_the_check_off(tmp_path: Path):
    import pickle

    import torch

    from src.core.io import CorruptFileError, load_from_file

    class Payload:
        def __reduce__(self) -> tuple:
            return (Path.touch, (tmp_path / "payload-ran",))

    path = tmp_path / "policy.pt"
    torch.save({"weights": Payload()}, path)
    with pytest.raises(CorruptFileError) as error:
        load_from_file(tmp_path, "policy.pt")
    message = _one_line_naming(error.value, path)
    assert "weights_only" not in message and "allowlist" not in message, message
    assert "not torch state" in message
    assert not (tmp_path / "payload-ran").exists()
    assert pickle.UnpicklingError not in type(error.value).__mro__


# ------------------------------------------------------------- config: alias bombs, seeds


def _alias_bomb(levels: int) -> str:
    """A YAML flow list of `levels` anchors, each repeating the previous one ten times: a
    few hundred bytes that expand to 10**levels values."""
    items = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    items += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return f"[{', '.join(items)}]"


def _test_config_text(**replace: str) -> str:
    from tests.reliability.helpers import REPO

    lines = (REPO / ".test" / "config.yaml").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        key = line.split(":", 1)[0]
        out.append(f"{key}: {replace.pop(key)}" if key in replace else line)
    return "\n".join([*out, *(f"{key}: {value}" for key, value in replace.items())]) + "\n"


@pytest.mark.parametrize("key", ["num_runs", "unknown_key"])
def test_a_yaml_alias_bomb_is_refused_at_once(key: str):
    import time

    import yaml

    from src.config.workflow import WorkflowConfigError, check_workflow_config

    # 10**30 values once expanded: anything walking it would never finish.
    config = yaml.safe_load(_test_config_text(**{key: _alias_bomb(30)}))
    started = time.monotonic()
    with pytest.raises(WorkflowConfigError) as error:
        check_workflow_config(config)
    message = str(error.value)
    assert "\n" not in message and f"'{key}'" in message and "100000" in message, message
    assert time.monotonic() - started < 2


def test_a_self_containing_or_deep_config_is_refused():
    import yaml

    from src.config.workflow import WorkflowConfigError, check_workflow_config

    for text, why in (
        (_test_config_text(extra="&loop [1, *loop]"), "contains it"),
        (_test_config_text(extra="[" * 200 + "]" * 200), "deeper than 64"),
    ):
        with pytest.raises(WorkflowConfigError, match=why) as error:
            check_workflow_config(yaml.safe_load(text))
        assert "\n" not in str(error.value) and "'extra" in str(error.value)


def test_snakemake_refuses_an_alias_bomb_fast_and_small(tmp_path: Path):
    import resource
    import subprocess
    import sys
    import time

    from tests.reliability.helpers import REPO, child_env

    config = tmp_path / "bomb.yaml"
    config.write_text(_test_config_text(num_runs=_alias_bomb(9)), encoding="utf-8")
    assert config.stat().st_size < 2000
    workdir = tmp_path / "work"
    workdir.mkdir()

    def cap_memory() -> None:  # a regression fails with MemoryError, not by eating the machine
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    snakemake = Path(sys.executable).with_name("snakemake")
    command = [str(snakemake), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--configfile", str(config), "-n"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        preexec_fn=cap_memory,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("invalid config:")]
    assert "'num_runs'" in line and "expands to more than 100000 values" in line, line
    assert time.monotonic() - started < 30


SEEDS = {
    # name: (key, value, more keys, the key the message names)
    "huge seed_offset": ("seed_offset", 10**23, {}, "base.seed_offset"),
    "float seed_offset": ("seed_offset", 1e23, {}, "base.seed_offset"),
    "run seeds past 2**32": ("seed_offset", 2**32 - 1, {}, "base.seed_offset"),
    "env copies past 2**32": ("seed_offset", 2**32 - 2, {"num_envs": 4}, "base.seed_offset"),
    "evaluation seeds past 2**32": (
        "final_policy_eval_seed_offset",
        2**32 - 4,
        {},
        "base.final_policy_eval_seed_offset",
    ),
}


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_offsets_whose_seeds_do_not_fit_are_refused(name: str):
    import yaml

    from src.config.workflow import WorkflowConfigError, check_workflow_config
    from tests.reliability.helpers import REPO

    key, value, more, named = SEEDS[name]
    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text(encoding="utf-8"))
    config["base"].update({key: value, **more})
    with pytest.raises(WorkflowConfigError) as error:
        check_workflow_config(config)
    message = str(error.value)
    assert "\n" not in message and f"'{named}'" in message and "4294967295" in message, message


def test_video_seeds_past_2_32_are_refused_and_the_largest_fitting_offsets_pass():
    import yaml

    from src.config.base import SEED_MAX
    from src.config.workflow import WorkflowConfigError, check_workflow_config
    from tests.reliability.helpers import REPO

    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text(encoding="utf-8"))
    config["base"]["final_policy_eval_seed_offset"] = SEED_MAX - 7  # 8 evaluation episodes
    config["base"]["seed_offset"] = SEED_MAX - 1  # one run, two env copies
    check_workflow_config(config)
    config["render"]["episodes"] = 9
    with pytest.raises(WorkflowConfigError, match=r"render\.episodes"):
        check_workflow_config(config)


def test_evaluation_seeds_of_later_runs_must_fit_too():
    """Run r evaluates offset + r * N + i: the last run's last seed is the largest."""
    import yaml

    from src.config.base import SEED_MAX
    from src.config.workflow import WorkflowConfigError, check_workflow_config
    from tests.reliability.helpers import REPO

    config = yaml.safe_load((REPO / ".test" / "config.yaml").read_text(encoding="utf-8"))
    config["base"]["final_policy_eval_seed_offset"] = SEED_MAX - 15  # 2 runs x 8 episodes
    config["num_runs"] = 2
    check_workflow_config(config)
    config["num_runs"] = 3
    with pytest.raises(
        WorkflowConfigError, match=r"'base\.final_policy_eval_seed_offset'.*num_runs"
    ):
        check_workflow_config(config)


# ------------------------------------------------------------- stale-lock takeover


def _dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **_TEXT)
    return int(child.stdout)


_TEXT: dict[str, Any] = {"capture_output": True, "text": True, "check": True}


def test_two_workflows_taking_over_one_stale_lock_cannot_both_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Both contenders read the same stale lock; the slow one acts only after the fast one
    has taken it over. Only one may hold the lock afterwards."""
    import json
    import os
    import socket
    import threading
    import time

    from src import lock as lock_module
    from src.lock import LockHeldError, ResultsLock

    folder = tmp_path / "results" / "test"
    folder.mkdir(parents=True)
    dead = _dead_pid()
    stale = {"pid": dead, "host": socket.gethostname(), "cwd": "/", "started": 0, "token": "x"}
    (folder / ".lock").write_text(json.dumps(stale))

    both_read = threading.Barrier(2, timeout=20)
    delays = {"fast": 0.0, "slow": 0.5}
    judged: set[str] = set()
    real_pid_alive = lock_module.pid_alive

    def pid_alive(pid: int) -> bool:
        if pid != dead:
            return real_pid_alive(pid)
        name = threading.current_thread().name
        if name not in judged:  # the first look at the stale lock: force the race window
            judged.add(name)
            both_read.wait()
            time.sleep(delays[name])
        return False

    monkeypatch.setattr(lock_module, "pid_alive", pid_alive)
    outcome: dict[str, str | BaseException] = {}

    def contend(name: str) -> None:
        try:
            outcome[name] = ResultsLock(folder).acquire()
        except (LockHeldError, threading.BrokenBarrierError) as error:
            outcome[name] = error

    threads = [threading.Thread(target=contend, args=(name,), name=name) for name in delays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert judged == set(delays)  # both saw the stale lock before either took it over
    winners = [name for name, result in outcome.items() if isinstance(result, str)]
    assert winners == ["fast"], outcome
    refusal = str(outcome["slow"])
    assert "\n" not in refusal and f"pid {os.getpid()}" in refusal, refusal
    assert json.loads((folder / ".lock").read_text())["token"] == outcome["fast"]


ACQUIRE = """
import sys
from src.lock import ResultsLock
ResultsLock(sys.argv[2]).acquire()
"""


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "FIFO"])
def test_a_lock_file_that_is_a_link_or_fifo_is_refused_in_one_line(tmp_path: Path, kind: str):
    import os

    folder = tmp_path / "results" / "test"
    folder.mkdir(parents=True)
    lock = folder / ".lock"
    if kind == "FIFO":
        os.mkfifo(lock)
    else:
        lock.symlink_to("/dev/zero")
    # In a child with memory and time capped: reading either would never end.
    line = _run_limited(ACQUIRE, str(folder), timeout=60)
    assert line.startswith("LockHeldError: ")
    _one_line_naming(line, lock)


# ------------------------------------------------------------- paths as the workflow gives them


def test_relative_paths_as_jobs_pass_them_work_and_are_checked(
    finished: Path, monkeypatch: pytest.MonkeyPatch
):
    """Jobs run in the working directory with paths relative to it (`results/test/...`)."""
    from src.analysis.video_page import write_video_page
    from src.analysis.wandb_upload import upload_experiment

    monkeypatch.chdir(finished.parents[1])
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(finished / "no.netrc"))
    videos = Path("results/test/runs/hazard_grid/ippo/run0/videos")
    (videos / "e-0.mp4").write_bytes(b"a video")

    index = write_video_page([str(videos)], ["run"], "results/test/video_page", title="T")
    assert (index.parent / "run" / "e-0.mp4").read_bytes() == b"a video"
    upload_experiment("results/test", sync=False)
    assert (finished / "wandb" / "upload.done").is_file()

    (videos / "e-1.mp4").symlink_to("/dev/zero")
    with pytest.raises(ContainmentError) as error:
        write_video_page([str(videos)], ["run"], "results/test/video_page", title="T")
    _one_line_naming(error.value, (videos / "e-1.mp4").absolute())
