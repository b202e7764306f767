"""Reader of offline wandb run files (`run-<id>.wandb`).

An offline run keeps everything it logged only in its `run-<id>.wandb` file, and wandb 0.31
ships no public reader for it. The format, as written by wandb-core 0.31 (checked against
files it writes):

- a 7-byte header: `<4sHB` = ident `b":W&B"`, magic `0xBEE1`, version `0`;
- then the LevelDB log format (https://github.com/google/leveldb/blob/main/doc/log_format.md)
  in 32 KiB blocks counted from the start of the file (the header sits in the first block).
  Each chunk has a 7-byte header `<IHB` = checksum, payload length, type (FULL=1, FIRST=2,
  MIDDLE=3, LAST=4) followed by the payload; a record too long for the rest of a block is
  split into FIRST, MIDDLE..., LAST chunks, and fewer than 7 bytes left in a block are zero
  padding. Unlike LevelDB (masked CRC-32C), the checksum is the plain zlib CRC-32 of the type
  byte followed by the payload;
- each record is a serialised `wandb.proto.wandb_internal_pb2.Record`. Logged rows are
  `history` records: `record.history.item` holds (`key` or `nested_key`, `value_json`) pairs,
  and `record.history.step.num` the step. Summary updates are `summary` records:
  `record.summary.update` (set) and `record.summary.remove` (deleted) items.

>>> rows = read_history(find_run_files("results/quick/wandb")[0])  # doctest: +SKIP
>>> rows[0]["_step"], rows[0]["train/team_return"]  # doctest: +SKIP
(7, -3.5)
"""

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from wandb.proto.wandb_internal_pb2 import Record

__all__ = ["WandbFileError", "find_run_files", "read_history", "read_records", "read_summary"]

HEADER = struct.Struct("<4sHB")
HEADER_IDENT = b":W&B"
HEADER_MAGIC = 0xBEE1
HEADER_VERSION = 0
BLOCK_SIZE = 32768
CHUNK_HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class WandbFileError(ValueError):
    """A `.wandb` file is not in the expected format or is damaged (names path and offset)."""


def _chunks(path: Path, data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """Yield (offset, type, payload) for every chunk, checking lengths and checksums."""
    pos = HEADER.size
    while pos < len(data):
        left_in_block = BLOCK_SIZE - pos % BLOCK_SIZE
        if left_in_block < CHUNK_HEADER.size:
            # The writer pads a block tail too short for a chunk header with zeros.
            if data[pos : pos + left_in_block].strip(b"\x00"):
                raise WandbFileError(f"{path}: offset {pos}: non-zero bytes in block padding")
            pos += left_in_block
            continue
        if len(data) - pos < CHUNK_HEADER.size:
            raise WandbFileError(
                f"{path}: offset {pos}: truncated chunk header ({len(data) - pos} bytes left)"
            )
        checksum, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        start = pos + CHUNK_HEADER.size
        if length > left_in_block - CHUNK_HEADER.size:
            raise WandbFileError(
                f"{path}: offset {pos}: chunk length {length} crosses the 32 KiB block end"
            )
        if start + length > len(data):
            raise WandbFileError(
                f"{path}: offset {pos}: truncated chunk ({length} bytes announced, "
                f"{len(data) - start} present)"
            )
        payload = data[start : start + length]
        expected = zlib.crc32(payload, zlib.crc32(bytes([kind])))
        if checksum != expected:
            raise WandbFileError(
                f"{path}: offset {pos}: checksum mismatch (stored {checksum:#010x}, "
                f"computed {expected:#010x})"
            )
        yield pos, kind, payload
        pos = start + length


def _payloads(path: Path, data: bytes) -> Iterator[tuple[int, bytes]]:
    """Reassemble FULL / FIRST+MIDDLE*+LAST chunks into (offset, record bytes)."""
    parts: list[bytes] | None = None
    record_start = 0
    for pos, kind, payload in _chunks(path, data):
        if kind == FULL:
            if parts is not None:
                raise WandbFileError(f"{path}: offset {pos}: FULL chunk inside a split record")
            yield pos, payload
        elif kind == FIRST:
            if parts is not None:
                raise WandbFileError(f"{path}: offset {pos}: FIRST chunk inside a split record")
            parts, record_start = [payload], pos
        elif kind in (MIDDLE, LAST):
            if parts is None:
                name = "MIDDLE" if kind == MIDDLE else "LAST"
                raise WandbFileError(f"{path}: offset {pos}: {name} chunk without a FIRST chunk")
            parts.append(payload)
            if kind == LAST:
                yield record_start, b"".join(parts)
                parts = None
        else:
            raise WandbFileError(f"{path}: offset {pos}: unknown chunk type {kind}")
    if parts is not None:
        raise WandbFileError(
            f"{path}: offset {record_start}: file ends inside a split record (no LAST chunk)"
        )


def read_records(path: str | Path) -> Iterator[Record]:
    """Yield every `wandb_internal_pb2.Record` of an offline run file, in file order.

    Raises `FileNotFoundError` if the file is missing and `WandbFileError` (a `ValueError`)
    naming the path and byte offset if the header, a chunk (length, checksum, type,
    truncation) or a record is damaged. A file still being written may end mid-record and
    then raises too: read runs after `run.finish()`.
    """
    path = Path(path)
    data = path.read_bytes()
    if len(data) < HEADER.size:
        raise WandbFileError(f"{path}: {len(data)} bytes, too short for the wandb file header")
    ident, magic, version = HEADER.unpack_from(data, 0)
    if (ident, magic, version) != (HEADER_IDENT, HEADER_MAGIC, HEADER_VERSION):
        raise WandbFileError(
            f"{path}: not a wandb run file (header {ident!r}, magic {magic:#06x}, version "
            f"{version}; expected {HEADER_IDENT!r}, {HEADER_MAGIC:#06x}, {HEADER_VERSION})"
        )
    for offset, payload in _payloads(path, data):
        record = Record()
        try:
            record.ParseFromString(payload)
        except DecodeError as error:
            raise WandbFileError(f"{path}: offset {offset}: undecodable record: {error}") from None
        yield record


def _item_key(item: Any) -> str:
    # wandb-core writes every key as nested_key (a nested dict logs ["a", "b"]); wandb's own
    # history API joins nested keys with ".", and so do we.
    return item.key if item.key else ".".join(item.nested_key)


def read_history(path: str | Path) -> list[dict]:
    """Return the logged history rows of an offline run file, in logging order.

    Each row is a dict of key -> value decoded from JSON (numbers, strings, lists, dicts),
    including wandb's own `_step`, `_timestamp` and `_runtime`. Nested keys (from logging
    a nested dict) are joined with ".". Errors as in `read_records`.
    """
    rows = []
    for record in read_records(path):
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = _item_key(item)
            try:
                row[key] = json.loads(item.value_json)
            except json.JSONDecodeError as error:
                raise WandbFileError(
                    f"{path}: history row at step {record.history.step.num}: key {key!r} has "
                    f"invalid JSON {item.value_json!r}: {error}"
                ) from None
        rows.append(row)
    return rows


def read_summary(path: str | Path) -> dict:
    """Return the run summary of an offline run file: every `summary` record's updates and
    removals applied in file order, keys (nested ones joined with ".") -> values decoded from
    JSON. Errors as in `read_records`."""
    summary: dict = {}
    for record in read_records(path):
        if record.WhichOneof("record_type") != "summary":
            continue
        for item in record.summary.update:
            key = _item_key(item)
            try:
                summary[key] = json.loads(item.value_json)
            except json.JSONDecodeError as error:
                raise WandbFileError(
                    f"{path}: summary key {key!r} has invalid JSON {item.value_json!r}: {error}"
                ) from None
        for item in record.summary.remove:
            summary.pop(_item_key(item), None)
    return summary


def find_run_files(wandb_dir: str | Path) -> list[Path]:
    """Return every `run-<id>.wandb` file under `wandb_dir` (searched recursively), sorted.

    `start_run` with `wandb_dir=D` puts runs in `D/wandb/offline-run-<time>-<id>/`; wandb's
    `latest-run` symlink is skipped so each run appears once. Raises `FileNotFoundError` if
    `wandb_dir` does not exist and `NotADirectoryError` if it is not a directory.
    """
    root = Path(wandb_dir)
    if not root.exists():
        raise FileNotFoundError(f"wandb directory {root} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"wandb directory {root} is not a directory")
    found = {}
    for path in root.rglob("run-*.wandb"):
        if path.is_file():
            found.setdefault(path.resolve(), path)
    return sorted(found.values())
