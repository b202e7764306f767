"""Kill the whole workflow at bad moments, recover as the README says, lose nothing.

The `.test/config.yaml` experiment runs once without interruption (the reference), and once
in another folder where the Snakemake process group is SIGKILLed four times:

1. during training: every train job stops in the middle of its third policy update, after the
   checkpoint of update 2 (`fault_injection/pause_training.py`, a training callback);
2. while a video is written: ffmpeg has finished the hidden temporary mp4, which is not yet
   renamed into place (`fault_injection/sitecustomize.py` stops `os.replace`);
3. while Parquet is written: the export job of a run has published `history.parquet` and is
   about to publish `updates.parquet`;
4. during aggregation: `tables/eval.parquet` and `eval.csv` are published, `history.parquet`
   is about to be.

Between kills, `snakemake --unlock` and `snakemake --rerun-incomplete` restart the workflow
(stages 2 to 4 ask for a target that needs the job to be killed, so each moment is reached
for sure). After the last kill, Snakemake must refuse a rerun without `--unlock`, then one
without `--rerun-incomplete`, naming the missing flag each time. While any of it runs, a
sampler loads every output that exists, and after every kill every output must load. The
last restart is the README's recovery command for the whole
workflow; its outputs must equal the reference's: policy weights bit for bit, Parquet and
JSON data equal except the wall-clock measurements (`wall_time`, `charts/steps_per_second`,
`shield/seconds`, `shield/model_seconds`: elapsed time, which no rerun reproduces), videos
frame for frame, and the summary tables exactly.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from src.algos import metrics as M
from src.core.io import load_from_file
from tests.reliability.helpers import REPO, child_env

pytestmark = pytest.mark.slow

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TEST_CONFIG = Path(".test") / "config.yaml"
# The workflow files that a run uses: copied once, so both runs use the same code whatever
# happens to the working tree meanwhile (code under src/ is an input of the rules).
WORKFLOW_FILES = (
    "Snakefile",
    "workflow",
    "config",
    ".test",
    "profiles",
    "src",
    "environment.yml",
    "requirements.lock",
    "pyproject.toml",
)
FAULTS = Path(__file__).resolve().parent / "fault_injection"
RESULTS = Path("results") / "test"
# Measurements of elapsed wall-clock time, which no rerun reproduces: left out of comparisons.
WALL_CLOCK = M.WALL_CLOCK_KEYS
CORES = "2"
ALGOS = ("ippo", "ippo_lag", "shield")
STAGE_TIMEOUT = 300.0


# ------------------------------------------------------------------ checking outputs


def _check_video(path: Path) -> None:
    from moviepy.video.io.ffmpeg_reader import ffmpeg_parse_infos

    infos = ffmpeg_parse_infos(str(path))
    if not infos.get("video_n_frames"):
        raise ValueError(f"{path}: no video frames")


def _check_text(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        raise ValueError(f"{path}: does not end with a line break (cut short?)")


def _check_csv(path: Path) -> None:
    # pandas pads a short last row with NaN, so a cut-off CSV needs the line checks too.
    _check_text(path)
    with open(path, newline="", encoding="utf-8") as handle:
        widths = {len(row) for row in csv.reader(handle)}
    if len(widths) > 1:
        raise ValueError(f"{path}: rows of different widths {sorted(widths)}")
    pd.read_csv(path)


def _check_pdf(path: Path) -> None:
    data = path.read_bytes()
    if not data.startswith(b"%PDF") or b"%%EOF" not in data[-64:]:
        raise ValueError(f"{path}: not a complete PDF")


def _check_png(path: Path) -> None:
    import matplotlib.image

    matplotlib.image.imread(path)


def check_output(path: Path) -> None:
    """Load `path` by its suffix; raise if it is not a complete file of its format."""
    suffix = path.suffix
    if suffix in (".pt", ".parquet", ".json", ".npz", ".pkl"):
        load_from_file(path.parent, path.name)
    elif suffix == ".csv":
        _check_csv(path)
    elif suffix == ".tsv":
        pd.read_csv(path, sep="\t")
    elif suffix == ".mp4":
        _check_video(path)
    elif suffix == ".png":
        _check_png(path)
    elif suffix == ".pdf":
        _check_pdf(path)
    elif suffix in (".md", ".tex", ".done"):
        _check_text(path)
    elif suffix == ".html" and "</html>" not in path.read_text(encoding="utf-8"):
        raise ValueError(f"{path}: not a complete HTML page")


def output_files(workdir: Path) -> list[Path]:
    """Every file the workflow publishes under results/: no hidden temporary files, no logs
    (appended while jobs run), not wandb's own run folders (its format, written by wandb)."""
    root = workdir / RESULTS
    if not root.is_dir():
        return []
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if "logs" in rel.parts or rel.parts[:2] == ("wandb", "wandb"):
            continue
        if path.is_file():
            found.append(path)
    return sorted(found)


def broken_outputs(workdir: Path) -> list[str]:
    """Outputs that exist but do not load (a file removed while checking is skipped)."""
    broken = []
    for path in output_files(workdir):
        try:
            check_output(path)
        except FileNotFoundError:
            continue
        except Exception as error:
            if path.exists():
                broken.append(f"{path.relative_to(workdir)}: {type(error).__name__}: {error}")
    return broken


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


@dataclass
class Sampler:
    """Loads every existing output of `workdir` over and over while the workflow runs.

    A file already found good is checked again only once it changes (new inode, size or
    mtime), which keeps the sampler light on a busy machine.
    """

    workdir: Path
    interval: float = 0.5
    broken: list[str] = field(default_factory=list)
    rounds: int = 0
    checked: int = 0
    _good: set[tuple[Path, tuple[int, int, int]]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _check_round(self) -> None:
        for path in output_files(self.workdir):
            identity = _identity(path)
            if identity is None or (path, identity) in self._good:
                continue
            try:
                check_output(path)
            except FileNotFoundError:
                continue
            except Exception as error:
                if _identity(path) == identity:
                    rel = path.relative_to(self.workdir)
                    self.broken.append(f"{rel}: {type(error).__name__}: {error}")
                continue
            self.checked += 1
            self._good.add((path, identity))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._check_round()
            self.rounds += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------------- driving snakemake


def _command(workdir: Path, *args: str) -> list[str]:
    """Snakemake on `workdir`, with the frozen copy of the workflow next to it (`../repo`)."""
    repo = workdir.parent / "repo"
    return [
        str(SNAKEMAKE),
        "--snakefile",
        str(repo / "Snakefile"),
        "--configfile",
        str(repo / TEST_CONFIG),
        "--directory",
        str(workdir),
        "--cores",
        CORES,
        *args,
    ]


def new_workdir(base: Path, frozen_repo: Path) -> Path:
    """An empty `base/work` with `base/repo` pointing at the frozen workflow."""
    (base / "repo").symlink_to(frozen_repo, target_is_directory=True)
    workdir = base / "work"
    workdir.mkdir()
    return workdir


def _env(**extra: str) -> dict[str, str]:
    """The workflow's environment: fault injection importable, no wandb credentials or server
    of the machine's user (a test that wants them passes them in `extra`). The workflow puts
    its own copy of the repository on PYTHONPATH."""
    env = child_env()
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_MODE"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(FAULTS)
    env.update(extra)
    return env


def run_to_completion(workdir: Path, *args: str) -> None:
    log = workdir.parent / f"{workdir.name}-{len(list(workdir.parent.glob('*.log')))}.log"
    with open(log, "w", encoding="utf-8") as handle:
        done = subprocess.run(
            _command(workdir, *args),
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=_env(),
            timeout=STAGE_TIMEOUT * 2,
        )
    assert done.returncode == 0, f"snakemake {' '.join(args)} failed:\n{log.read_text()[-4000:]}"


def _processes_below(workdir: Path) -> list[int]:
    """Pids of processes whose command line mentions `workdir` (jobs of that workflow)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(workdir) in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


def kill_at(
    workdir: Path,
    marker: Path,
    *targets: str,
    ready: Callable[[], bool] = lambda: True,
    **env: str,
) -> None:
    """Start the workflow, wait for `marker` (and `ready()`), SIGKILL Snakemake's whole
    process group."""
    log = workdir.parent / f"{workdir.name}-{marker.stem}.log"
    marker.unlink(missing_ok=True)
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(
            _command(workdir, "--rerun-incomplete", *targets),
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=_env(**env),
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + STAGE_TIMEOUT
            while not (marker.exists() and ready()) and process.poll() is None:
                assert time.monotonic() < deadline, f"{marker.name} never appeared"
                time.sleep(0.05)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert marker.exists(), f"the workflow ended before {marker.name}:\n{log.read_text()[-3000:]}"
    # The jobs are in Snakemake's process group and died with it; nothing may live on.
    time.sleep(0.5)
    assert _processes_below(workdir) == [], "processes of the killed workflow survived"


def resumed_algos(runs: Path) -> set[str]:
    """Algorithms whose current train log says it resumed from a checkpoint (Snakemake
    replaces a job's log when the job starts again, so callers collect after every stage)."""
    found = set()
    for log in runs.glob("*/run0/logs/train.log"):
        if "from its checkpoint after update" in log.read_text(encoding="utf-8"):
            found.add(log.parents[2].name)
    return found


def assert_refused(workdir: Path, *args: str, expect: str) -> None:
    """Snakemake must refuse to start, telling the user to use the flag `expect`."""
    done = subprocess.run(
        _command(workdir, *args), capture_output=True, text=True, env=_env(), timeout=120
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0 and expect in output, output[-3000:]
    assert not (workdir / RESULTS / "tables" / "history.parquet").exists()


def unlock(workdir: Path) -> None:
    done = subprocess.run(
        _command(workdir, "--unlock"), capture_output=True, text=True, env=_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------------ comparing


def _drop_wall_clock(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in WALL_CLOCK if c in frame.columns])


def _strip_wall_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_wall_clock(v) for k, v in value.items() if k not in WALL_CLOCK}
    if isinstance(value, list):
        return [_strip_wall_clock(v) for v in value]
    return value


def _assert_same_state(expected: Any, found: Any, where: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(found, torch.Tensor), where
        assert expected.dtype == found.dtype and expected.shape == found.shape, where
        # Bit for bit: compare the raw bytes, so -0.0 vs 0.0 or NaN payloads would count too.
        assert expected.numpy().tobytes() == found.numpy().tobytes(), where
    elif isinstance(expected, dict):
        assert isinstance(found, dict) and list(expected) == list(found), where
        for key in expected:
            _assert_same_state(expected[key], found[key], f"{where}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert type(found) is type(expected) and len(found) == len(expected), where
        for i, (a, b) in enumerate(zip(expected, found, strict=True)):
            _assert_same_state(a, b, f"{where}[{i}]")
    else:
        assert expected == found, where


def _video_frames(path: Path) -> np.ndarray:
    from moviepy import VideoFileClip

    with VideoFileClip(str(path), audio=False) as clip:
        return np.stack(list(clip.iter_frames()))


def assert_same_outputs(reference: Path, resumed: Path) -> None:
    ref_files = {p.relative_to(reference) for p in output_files(reference)}
    new_files = {p.relative_to(resumed) for p in output_files(resumed)}
    assert ref_files == new_files
    checked = {".pt": 0, ".parquet": 0, ".json": 0, ".mp4": 0}
    # Weights first: a difference there explains any difference downstream.
    for rel in sorted(ref_files, key=lambda rel: (rel.suffix != ".pt", str(rel))):
        a, b = reference / rel, resumed / rel
        where = str(rel)
        if rel.suffix == ".pt":
            _assert_same_state(
                load_from_file(a.parent, a.name), load_from_file(b.parent, b.name), where
            )
        elif rel.suffix == ".parquet":
            frame_a = _drop_wall_clock(load_from_file(a.parent, a.name))
            frame_b = _drop_wall_clock(load_from_file(b.parent, b.name))
            pd.testing.assert_frame_equal(frame_a, frame_b, check_exact=True, obj=where)
        elif rel.suffix == ".csv":
            pd.testing.assert_frame_equal(
                _drop_wall_clock(pd.read_csv(a)),
                _drop_wall_clock(pd.read_csv(b)),
                check_exact=True,
                obj=where,
            )
        elif rel.suffix == ".json":
            data_a, data_b = json.loads(a.read_text()), json.loads(b.read_text())
            if rel.parts[-2:] == ("wandb", "manifest.json"):
                # Offline run folders carry a random id; the fingerprints (hashes of the bytes
                # of each run's config, history, evaluation and videos) must agree.
                data_a = {name: entry["fingerprint"] for name, entry in data_a.items()}
                data_b = {name: entry["fingerprint"] for name, entry in data_b.items()}
            assert _strip_wall_clock(data_a) == _strip_wall_clock(data_b), where
        elif rel.suffix in (".md", ".tex"):
            assert a.read_text() == b.read_text(), where
        elif rel.suffix == ".mp4":
            assert np.array_equal(_video_frames(a), _video_frames(b)), where
        else:
            continue
        checked[rel.suffix] = checked.get(rel.suffix, 0) + 1
    # Three runs: three policies; their videos (also copied into the video page).
    assert checked[".pt"] == 3 and checked[".mp4"] >= 3, checked
    assert checked[".parquet"] >= 3 * 3 + 3, checked


def assert_nothing_left_over(workdir: Path) -> None:
    root = workdir / RESULTS
    # Nor locks or the second name of a running training's log (src/lock.py, train_run).
    stray = {"checkpoint", ".lock", ".lock.takeover", ".train.lock", ".train.attempt.log"}
    leftovers = [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if (".tmp" in p.name or p.name in stray) and "wandb" not in p.relative_to(root).parts
    ]
    assert leftovers == []
    offline = sorted((root / "wandb" / "wandb").glob("offline-run-*"))
    assert len(offline) == 3, [p.name for p in offline]  # one per run: no duplicate from reruns


# ---------------------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def frozen_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow and its code, taken once for every run of this module."""
    copy = tmp_path_factory.mktemp("frozen") / "repo"
    copy.mkdir()
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    return copy


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, frozen_repo: Path) -> Iterator[Path]:
    workdir = new_workdir(tmp_path_factory.mktemp("reference"), frozen_repo)
    run_to_completion(workdir)
    yield workdir


def _run_dir(algo: str) -> str:
    return str(RESULTS / "runs" / "hazard_grid" / algo / "run0")


def test_killed_four_times_then_rerun_equals_an_uninterrupted_run(
    reference: Path, frozen_repo: Path, tmp_path: Path
):
    from src.algos.checkpoint import latest_checkpoint

    workdir = new_workdir(tmp_path, frozen_repo)
    pause = "RELIABILITY_PAUSE_BEFORE_REPLACE"

    with Sampler(workdir) as sampler:
        # 1. During training, after the checkpoint of update 2: all three train jobs run at
        # once and each stops in its third update, so every algorithm resumes from a checkpoint.
        marker = tmp_path / "training.marker"
        runs = workdir / RESULTS / "runs" / "hazard_grid"
        resumed: set[str] = set()

        def all_checkpointed() -> bool:
            return all(latest_checkpoint(runs / algo / "run0") is not None for algo in ALGOS)

        kill_at(
            workdir,
            marker,
            "--cores",
            str(len(ALGOS)),
            ready=all_checkpointed,
            RELIABILITY_PAUSE_TRAINING=f"mid_update:2:{marker}",
        )
        checkpoints = sorted(runs.glob("*/run0/checkpoint/update-*"))
        assert [p.parent.parent.parent.name for p in checkpoints] == sorted(ALGOS)
        for folder in checkpoints:
            for file in folder.iterdir():
                check_output(file)
        assert broken_outputs(workdir) == []
        resumed |= resumed_algos(runs)

        # 2. While a video is written.
        unlock(workdir)
        marker = tmp_path / "video.marker"
        videos = f"{_run_dir('ippo')}/videos"
        kill_at(workdir, marker, videos, **{pause: f".mp4|{marker}"})
        written = [p.name for p in (workdir / videos).glob("*.mp4")]
        # Killed between ffmpeg's last byte and the rename: only the hidden temp holds it.
        assert written and all(name.startswith(".") for name in written), written
        assert broken_outputs(workdir) == []
        resumed |= resumed_algos(runs)

        # 3. While Parquet is written.
        unlock(workdir)
        marker = tmp_path / "parquet.marker"
        exports = [f"{_run_dir(a)}/updates.parquet" for a in ("ippo", "ippo_lag", "shield")]
        kill_at(workdir, marker, *exports, **{pause: f"/updates.parquet|{marker}"})
        assert broken_outputs(workdir) == []
        resumed |= resumed_algos(runs)

        # 4. During aggregation.
        unlock(workdir)
        marker = tmp_path / "aggregate.marker"
        tables = str(RESULTS / "tables" / "history.parquet")
        kill_at(workdir, marker, tables, **{pause: f"tables/history.parquet|{marker}"})
        assert (workdir / RESULTS / "tables" / "eval.parquet").exists()
        assert not (workdir / tables).exists()
        assert broken_outputs(workdir) == []
        resumed |= resumed_algos(runs)

        # Both recovery steps of the README are needed, and Snakemake says which one is missing.
        assert_refused(workdir, "--rerun-incomplete", expect="--unlock")
        unlock(workdir)
        assert_refused(workdir, expect="--rerun-incomplete")

        # The README's recovery: unlock, then rerun the incomplete jobs and everything after.
        run_to_completion(workdir, "--rerun-incomplete")
        resumed |= resumed_algos(runs)

    assert sampler.rounds > 10
    # Every algorithm's training resumed from a checkpoint at least once (a job killed after
    # training finished but before Snakemake recorded it reruns from scratch, which is fine).
    assert resumed == set(ALGOS)
    assert sampler.broken == []
    assert broken_outputs(workdir) == []
    assert_nothing_left_over(workdir)
    assert_same_outputs(reference, workdir)

    # A further rerun finds nothing to do: the recovered results are complete and up to date.
    done = subprocess.run(
        _command(workdir, "--dry-run"), capture_output=True, text=True, env=_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout[-2000:]


def test_reference_outputs_all_load(reference: Path):
    assert output_files(reference)
    assert broken_outputs(reference) == []
    assert_nothing_left_over(reference)


def test_checker_refuses_damaged_outputs(reference: Path, tmp_path: Path):
    # The sampler above is only as good as check_output: each damaged copy must be refused.
    samples = {
        ".pt": _run_dir("ippo") + "/policy.pt",
        ".parquet": str(RESULTS / "tables" / "eval.parquet"),
        ".json": _run_dir("ippo") + "/history.json",
        ".mp4": _run_dir("ippo") + "/videos/hazard_grid-ippo-run0-episode-0.mp4",
        ".png": _run_dir("ippo") + "/videos/poster.png",
        ".csv": str(RESULTS / "tables" / "summary.csv"),
        ".md": str(RESULTS / "tables" / "summary.md"),
    }
    for suffix, rel in samples.items():
        source = reference / rel
        damaged = tmp_path / f"damaged{suffix}"
        data = source.read_bytes()
        if suffix in (".csv", ".md"):
            data = data[: data.rfind(b"\n", 0, len(data) // 2) + 2]  # cut inside a line
        else:
            data = data[: len(data) // 2]
        damaged.write_bytes(data)
        with pytest.raises(Exception):  # noqa: B017 - any refusal will do, it must not load
            check_output(damaged)


def test_upload_rule_without_network_ends_in_one_line(reference: Path, tmp_path: Path):
    """The wandb_upload rule itself, upload on, credentials set, nothing listening."""
    repo = reference.parent / "repo"
    config = yaml.safe_load((repo / TEST_CONFIG).read_text(encoding="utf-8"))
    config["wandb"] = {**config.get("wandb", {}), "upload": True}
    upload_config = tmp_path / "upload.yaml"
    upload_config.write_text(yaml.safe_dump(config), encoding="utf-8")
    offline = sorted((reference / RESULTS / "wandb" / "wandb").glob("offline-run-*"))
    env = _env(
        WANDB_BASE_URL="http://127.0.0.1:9", WANDB_API_KEY="0123456789abcdef" * 2 + "01234567"
    )
    done = subprocess.run(
        _command(
            reference,
            "--forcerun",
            "wandb_upload",
            "--allowed-rules",
            "wandb_upload",
            "--configfile",
            str(upload_config),
        ),
        capture_output=True,
        text=True,
        env=env,
        timeout=STAGE_TIMEOUT,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    lines = [line for line in output.splitlines() if "[wandb]" in line]
    assert len(lines) == 1, output[-3000:]
    assert "upload skipped" in lines[0] and "127.0.0.1:9 unreachable" in lines[0]
    assert sorted((reference / RESULTS / "wandb" / "wandb").glob("offline-run-*")) == offline
    assert not list((reference / RESULTS / "wandb").glob("synced/*.done"))
