"""Fuzz the HA follower with a hostile master: chunks built to break the replica.

A replica store and its HA service follow a master address where the test
serves Replicate itself: each connection gets one session of Hypothesis-built
chunks (a handshake with hostile segment sizes, epochs, offsets and cuts, then
chunks of random bytes at consistent or wrong offsets, or any generated
CommitLogChunk, or mutated bytes) and is then ended by the "master".

Invariant: the follower refuses every session (nothing of the random bytes
reaches the replica's CommitLog), never hangs (after each session it connects
again within the deadline), and after the batch the replica store and its HA
service are alive, answer their health checks and logged no traceback.
Sessions: ``BOLTMQ_FUZZ_EXAMPLES``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import store_pb2
from tests.fuzz.test_grpc_handlers import CALL_TIMEOUT_S, SETTINGS, message_of, mutated_bytes
from tests.integration.conftest import CLUSTER_STORE_SETTINGS

SEGMENT_BYTES = 4_194_304
INT64_MAX = 2**63 - 1
EDGES = [0, 1, -1, INT64_MAX, -(2**63), SEGMENT_BYTES, SEGMENT_BYTES - 1]
HA_SETTINGS = (
    "heartbeat_interval_ms=200",
    "housekeeping_interval_ms=2000",
    "reconnect_min_ms=20",
    "reconnect_max_ms=40",
)


class HostileMaster:
    """A Replicate server that plays one queued session per connection, then hangs up."""

    def __init__(self) -> None:
        self.sessions: queue.Queue[list[bytes]] = queue.Queue()
        self.connections = 0
        self.played_at = 0
        """The connection that played the last session taken."""
        self._changed = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "boltmq.v1.HAService",
                    {"Replicate": grpc.stream_stream_rpc_method_handler(self._replicate)},
                ),
            )
        )
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _replicate(
        self, reports: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        with self._changed:
            self.connections += 1
            try:
                session = self.sessions.get_nowait()
                self.played_at = self.connections
            except queue.Empty:
                session = []
            self._changed.notify_all()
        next(reports, None)  # the replica's first report
        yield from session

    def play(self, session: list[bytes]) -> bool:
        """Queue ``session``; True once it was played and the follower connected again."""
        self.sessions.put(session)
        deadline = time.monotonic() + CALL_TIMEOUT_S
        with self._changed:
            while not (self.sessions.empty() and self.connections > self.played_at):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def stop(self) -> None:
        self._server.stop(grace=None)


@st.composite
def plausible_session(draw: st.DrawFn) -> list[bytes]:
    """A handshake with hostile fields, then random bytes at right or wrong offsets."""
    edge = st.sampled_from(EDGES)
    handshake = store_pb2.CommitLogChunk(
        handshake=True,
        offset=draw(st.sampled_from([0, 0, 1, -1, 2**63 - 1])),
        segment_bytes=draw(st.sampled_from([SEGMENT_BYTES, SEGMENT_BYTES, 0, -1, 1])),
        master_epoch=draw(st.one_of(edge, st.integers(0, 5))),
        truncate_to=draw(st.sampled_from([-1, -1, 0, 1, -2, 2**63 - 1])),
        master_max_offset=draw(edge),
        epochs=[
            store_pb2.EpochStart(epoch=e, start_offset=o)
            for e, o in draw(st.lists(st.tuples(edge, edge), max_size=3))
        ],
    )
    chunks = [handshake.SerializeToString()]
    offset = 0
    for data in draw(st.lists(st.binary(max_size=400), max_size=4)):
        start = offset if draw(st.booleans()) else draw(edge)
        end = min(start + len(data), INT64_MAX) if draw(st.booleans()) else draw(edge)
        chunks.append(
            store_pb2.CommitLogChunk(
                offset=start, data=data, end_offset=end, master_max_offset=draw(edge)
            ).SerializeToString()
        )
        offset += len(data)
    return chunks


SESSIONS = st.one_of(
    plausible_session(),
    st.lists(
        message_of(store_pb2.CommitLogChunk.DESCRIPTOR).map(lambda m: m.SerializeToString()),
        max_size=4,
    ),
    st.lists(mutated_bytes(store_pb2.CommitLogChunk.DESCRIPTOR), max_size=4),
)


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[HostileMaster, ServiceProcess, ServiceProcess]]:
    master = HostileMaster()
    store = ServiceProcess(
        "store",
        tmp_path / "logs",
        f"root_dir={tmp_path / 'replica'}",
        "broker_role=SLAVE",
        *CLUSTER_STORE_SETTINGS,
    ).start()
    ha = ServiceProcess(
        "ha",
        tmp_path / "logs",
        f"store_address={store.address}",
        f"master_address={master.address}",
        *HA_SETTINGS,
    ).start()
    try:
        yield master, store, ha
    finally:
        ha.stop()
        store.stop()
        master.stop()


def test_a_follower_fed_hostile_chunks_refuses_them_comes_back_and_stays_up(
    follower: tuple[HostileMaster, ServiceProcess, ServiceProcess], tmp_path: Path
) -> None:
    master, store, ha = follower
    stuck: list[list[bytes]] = []

    @SETTINGS
    @example([b"\x82:\x18_"])  # bytes that are no chunk: grpc's own parser would log a traceback
    @example([])  # a master that hangs up at once
    @given(SESSIONS)
    def one_session(session: list[bytes]) -> None:
        if not master.play(session):
            stuck.append(session)

    one_session()
    assert stuck == [], f"the follower did not come back after {len(stuck)} sessions: {stuck[:3]}"
    for proc in (store, ha):
        assert proc.alive(), f"{proc.service} died: {proc.last_error()}"
    with sync_channel(store.address) as channel:
        info = channel.unary_unary(
            "/boltmq.v1.StoreService/GetStoreInfo",
            request_serializer=store_pb2.GetStoreInfoRequest.SerializeToString,
            response_deserializer=store_pb2.StoreInfo.FromString,
        )(store_pb2.GetStoreInfoRequest(), timeout=CALL_TIMEOUT_S)
    assert info.commitlog_max_offset == 0, info
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*.log"))
    assert "Traceback (most recent call last)" not in logs
