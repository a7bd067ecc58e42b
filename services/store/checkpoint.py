"""The checkpoint file: how far each kind of data is known to be on disk.

One 4 KiB file, big-endian:

Offset | Size | Field
-------+------+-----------------------------------------------------------------
0      | 8    | physic_msg_timestamp: store time (ms) of the last flushed CommitLog record
8      | 8    | logics_msg_timestamp: store time of the last flushed consume-queue entry
16     | 8    | index_msg_timestamp: every record stored at or before it is flushed in the index
24     | 4    | version (CHECKPOINT_VERSION)
28     | 4    | crc32 of bytes [0, 28)
32     | ...  | zero

Written in place with one 4 KiB ``pwrite`` + ``fdatasync`` (one page, so it
is never torn in practice); a bad CRC or version reads as all-zero timestamps,
which makes crash recovery start from the first segment: slow but safe.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CHECKPOINT_FILE_SIZE: Final = 4096
CHECKPOINT_PHYSIC_TS_OFFSET: Final = 0
CHECKPOINT_LOGICS_TS_OFFSET: Final = 8
CHECKPOINT_INDEX_TS_OFFSET: Final = 16
CHECKPOINT_VERSION_OFFSET: Final = 24
CHECKPOINT_CRC_OFFSET: Final = 28
CHECKPOINT_VERSION: Final = 1

BODY = struct.Struct(">qqqi")
assert BODY.size == CHECKPOINT_CRC_OFFSET
CRC = struct.Struct(">I")


class CorruptCheckpoint(ValueError):
    """The checkpoint's CRC or version does not match."""


@dataclass
class CheckpointState:
    """The three timestamps (ms)."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0

    def min_timestamp(self, with_index: bool = True) -> int:
        """The oldest of the timestamps: recovery restarts from before it."""
        values = [self.physic_msg_timestamp, self.logics_msg_timestamp]
        if with_index:
            values.append(self.index_msg_timestamp)
        return min(values)


def encode_checkpoint(state: CheckpointState) -> bytes:
    """The whole 4 KiB file."""
    body = BODY.pack(
        state.physic_msg_timestamp,
        state.logics_msg_timestamp,
        state.index_msg_timestamp,
        CHECKPOINT_VERSION,
    )
    page = bytearray(CHECKPOINT_FILE_SIZE)
    page[:CHECKPOINT_CRC_OFFSET] = body
    CRC.pack_into(page, CHECKPOINT_CRC_OFFSET, zlib.crc32(body))
    return bytes(page)


def decode_checkpoint(raw: bytes) -> CheckpointState:
    """Parse a checkpoint; CorruptCheckpoint when short, torn or of another version."""
    if len(raw) < CHECKPOINT_CRC_OFFSET + CRC.size:
        raise CorruptCheckpoint(f"checkpoint is {len(raw)} bytes, expected {CHECKPOINT_FILE_SIZE}")
    physic, logics, index, version = BODY.unpack_from(raw, 0)
    (crc,) = CRC.unpack_from(raw, CHECKPOINT_CRC_OFFSET)
    if crc != zlib.crc32(raw[:CHECKPOINT_CRC_OFFSET]):
        raise CorruptCheckpoint("checkpoint CRC mismatch")
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpoint(f"checkpoint version {version}, expected {CHECKPOINT_VERSION}")
    if min(physic, logics, index) < 0:
        raise CorruptCheckpoint("checkpoint holds a negative timestamp")
    return CheckpointState(physic, logics, index)


class Checkpoint:
    """The open checkpoint file of a store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = CheckpointState()
        self.problem = ""
        """Why the file on disk was not usable (empty when it was)."""
        exists = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if exists:
            raw = os.pread(self._fd, CHECKPOINT_FILE_SIZE, 0)
            try:
                self.state = decode_checkpoint(raw)
            except CorruptCheckpoint as exc:
                self.problem = str(exc)
        # The page is allocated now, while there is room: on a full disk a later
        # flush of a never-written checkpoint would fail with ENOSPC every time.
        if os.fstat(self._fd).st_size < CHECKPOINT_FILE_SIZE:
            os.posix_fallocate(self._fd, 0, CHECKPOINT_FILE_SIZE)

    def flush(self) -> None:
        """Write the current state durably."""
        os.pwrite(self._fd, encode_checkpoint(self.state), 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
