"""Tests of src.core.wandb_file: reading offline run files written by wandb itself, and
hand-framed files for the corner cases of the LevelDB log format and for damaged files."""

import json
import struct
import zlib

import pytest
from wandb.proto.wandb_internal_pb2 import Record

from src.core.wandb import create_base_config, log_history, start_run
from tests import wandb_file
from tests.wandb_file import WandbFileError, find_run_files, read_history, read_records

BLOCK = 32768
HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)


def frame(payloads):
    """Frame record payloads the way LevelDB's log writer does (independent of the reader)."""
    out = bytearray(HEADER)
    for payload in payloads:
        pos, first = 0, True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\x00" * left
                left = BLOCK
            size = min(left - 7, len(payload) - pos)
            last = pos + size == len(payload)
            kind = 1 if first and last else 2 if first else 4 if last else 3
            part = payload[pos : pos + size]
            out += struct.pack("<IHB", zlib.crc32(part, zlib.crc32(bytes([kind]))), size, kind)
            out += part
            pos, first = pos + size, False
            if last:
                break
    return bytes(out)


def history_record(step, size=None, **values):
    """A history Record; with `size`, padded by a string item to exactly `size` bytes."""
    record = Record()
    record.history.step.num = step
    for key, value in {"_step": step, **values}.items():
        item = record.history.item.add()
        item.nested_key.append(key)
        item.value_json = json.dumps(value)
    if size is None:
        return record
    for n in range(size, -1, -1):
        padded = Record()
        padded.CopyFrom(record)
        item = padded.history.item.add()
        item.nested_key.append("pad")
        item.value_json = json.dumps("x" * n)
        if len(padded.SerializeToString()) == size:
            return padded
    raise AssertionError(f"no record of {size} bytes")


# ------------------------------------------------------------------------------------------
# A real offline run
# ------------------------------------------------------------------------------------------

BIG = "b" * 80_000  # spans three 32 KiB blocks: FIRST, MIDDLE and LAST chunks


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    # `import wandb` stays local: a stray ./wandb run folder makes linters take it for a
    # first-party package, which would reorder a top-level import block.
    import wandb

    root = tmp_path_factory.mktemp("wandb_file")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_SILENT", "true")
        for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
            patch.setenv(name, str(root / name.lower()))
        patch.setenv("WANDB_ARTIFACT_DIR", str(root / "artifacts"))
        patch.delenv("WANDB_MODE", raising=False)
        cfg = create_base_config(
            "hazard_grid", 2, 2, 64, 1, 16, 2, 4, 3e-4, 0.1, True, wandb_dir=str(root / "runs")
        )
        run = start_run("ippo", 0, cfg)
        log_history(
            run,
            [
                {"step": 1, "loss": 0.5, "charts/x": -2, "nested": {"a": {"b": [1, 2]}}},
                {"step": 4, "big": BIG, "flag": True, "none": None},
                {"step": 6, "loss": 0.25},
            ],
        )
        run.finish()
        # finish() returns before wandb's service has flushed the file; teardown waits.
        wandb.teardown()
    (path,) = find_run_files(root / "runs")
    return path


def test_read_history_returns_the_logged_rows(real_run):
    rows = read_history(real_run)
    for row in rows:
        assert isinstance(row.pop("_timestamp"), float)
        assert isinstance(row.pop("_runtime"), float)
    assert rows == [
        {"_step": 1, "loss": 0.5, "charts/x": -2, "nested.a.b": [1, 2]},
        {"_step": 4, "big": BIG, "flag": True, "none": None},
        {"_step": 6, "loss": 0.25},
    ]


def test_read_records_sees_the_whole_run(real_run):
    kinds = [record.WhichOneof("record_type") for record in read_records(real_run)]
    assert kinds[0] == "header"
    assert kinds.count("run") == 1
    assert kinds.count("history") == 3
    assert kinds[-1] == "exit"
    assert real_run.stat().st_size > 2 * BLOCK


def test_reframing_the_payloads_reproduces_the_file_byte_for_byte(real_run):
    # The reader's record boundaries, framed again by the independent writer above, give back
    # wandb's own file: header, block padding, chunk splitting and checksums all agree.
    data = real_run.read_bytes()
    payloads = [payload for _, payload in wandb_file._payloads(real_run, data)]
    assert frame(payloads) == data


def test_find_run_files_lists_each_run_once(real_run):
    runs_dir = real_run.parents[2]
    assert (runs_dir / "wandb" / "latest-run").is_symlink()  # wandb's alias of the same run
    assert find_run_files(runs_dir) == [real_run]
    assert find_run_files(real_run.parents[1]) == [real_run]
    assert find_run_files(runs_dir / "wandb" / "latest-run") == [
        runs_dir / "wandb" / "latest-run" / real_run.name
    ]


def test_find_run_files_errors(tmp_path):
    assert find_run_files(tmp_path) == []
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_run_files(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        find_run_files(tmp_path / "file")


def test_a_damaged_real_file_is_refused(real_run, tmp_path):
    data = bytearray(real_run.read_bytes())
    data[200] ^= 0xFF
    damaged = tmp_path / "run-x.wandb"
    damaged.write_bytes(bytes(data))
    with pytest.raises(WandbFileError, match="checksum mismatch") as info:
        list(read_records(damaged))
    assert str(damaged) in str(info.value)


# ------------------------------------------------------------------------------------------
# Hand-framed files: the corners of the format
# ------------------------------------------------------------------------------------------


def write(tmp_path, data, name="run-t.wandb"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_block_tail_padding_and_empty_first_chunk(tmp_path):
    records = [
        # ends 3 bytes before the block end: the writer pads, the next chunk starts a block
        history_record(1, size=BLOCK - 7 - 7 - 3),
        history_record(2, loss=1.5),
        Record(),  # an empty record: a FULL chunk of length 0
    ]
    data = frame([r.SerializeToString() for r in records])
    assert data[BLOCK - 3 : BLOCK] == b"\x00\x00\x00"
    assert list(read_records(write(tmp_path, data))) == records

    # a record ending exactly 7 bytes before the block end: the next record begins with an
    # empty FIRST chunk (a chunk header and no data) and continues in the next block
    records = [history_record(1, size=BLOCK - 7 - 7 - 7), history_record(2, loss=2.5)]
    data = frame([r.SerializeToString() for r in records])
    assert struct.unpack("<IHB", data[BLOCK - 7 : BLOCK])[1:] == (0, 2)
    path = write(tmp_path, data)
    assert list(read_records(path)) == records
    assert [row["_step"] for row in read_history(path)] == [1, 2]


def test_a_record_spanning_several_blocks(tmp_path):
    records = [history_record(5, size=3 * BLOCK), history_record(6, loss=0.0)]
    path = write(tmp_path, frame([r.SerializeToString() for r in records]))
    assert list(read_records(path)) == records
    assert [row["_step"] for row in read_history(path)] == [5, 6]


def test_only_history_records_become_rows(tmp_path):
    run = Record()
    run.run.run_id = "abc"
    records = [run, history_record(3, team_return=-1.0)]
    path = write(tmp_path, frame([r.SerializeToString() for r in records]))
    assert read_history(path) == [{"_step": 3, "team_return": -1.0}]
    assert read_history(write(tmp_path, HEADER, "empty.wandb")) == []


def chunk(kind, payload, checksum=None):
    if checksum is None:
        checksum = zlib.crc32(payload, zlib.crc32(bytes([kind])))
    return struct.pack("<IHB", checksum, len(payload), kind) + payload


GOOD = history_record(1, loss=0.5).SerializeToString()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b":W&", "too short for the wandb file header"),
        (b"LEVELDB" + chunk(1, GOOD), "not a wandb run file"),
        (b":W&B" + struct.pack("<HB", 0xBEE1, 1) + chunk(1, GOOD), "not a wandb run file"),
        (HEADER + chunk(1, GOOD, checksum=12345), r"offset 7: checksum mismatch"),
        (HEADER + chunk(1, GOOD)[:-2], r"offset 7: truncated chunk \("),
        (HEADER + chunk(1, GOOD) + b"\x01\x02", "truncated chunk header"),
        (HEADER + chunk(9, GOOD), "unknown chunk type 9"),
        (HEADER + chunk(0, b""), "unknown chunk type 0"),
        (HEADER + chunk(3, GOOD), "MIDDLE chunk without a FIRST chunk"),
        (HEADER + chunk(4, GOOD), "LAST chunk without a FIRST chunk"),
        (HEADER + chunk(2, GOOD[:5]) + chunk(1, GOOD), "FULL chunk inside a split record"),
        (HEADER + chunk(2, GOOD[:5]) + chunk(2, GOOD), "FIRST chunk inside a split record"),
        (HEADER + chunk(2, GOOD[:5]) + chunk(3, GOOD[5:]), "file ends inside a split record"),
        (HEADER + chunk(1, b"\xff\xff\xff\xff"), "offset 7: undecodable record"),
        (HEADER + chunk(1, b"x" * (BLOCK - 14 + 1)), "crosses the 32 KiB block end"),
        (HEADER + chunk(1, b""), None),
    ],
)
def test_damaged_files_raise_naming_the_problem(tmp_path, data, match):
    path = write(tmp_path, data)
    if match is None:  # control: a well-formed file with one empty record reads fine
        assert list(read_records(path)) == [Record()]
        return
    with pytest.raises(WandbFileError, match=match) as info:
        list(read_records(path))
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_zero_block_padding_is_refused(tmp_path):
    data = bytearray(frame([history_record(1, size=BLOCK - 7 - 7 - 3).SerializeToString()]))
    data += b"\x00\x07\x00" + chunk(1, GOOD)
    path = write(tmp_path, bytes(data))
    with pytest.raises(WandbFileError, match=f"offset {BLOCK - 3}: non-zero bytes"):
        list(read_records(path))


def test_invalid_history_json_is_refused(tmp_path):
    record = history_record(2)
    record.history.item[0].value_json = "{bad"
    path = write(tmp_path, frame([record.SerializeToString()]))
    with pytest.raises(WandbFileError, match=r"step 2: key '_step' has invalid JSON '\{bad'"):
        read_history(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_records(tmp_path / "run-none.wandb"))
    with pytest.raises(FileNotFoundError):
        read_history(tmp_path / "run-none.wandb")
