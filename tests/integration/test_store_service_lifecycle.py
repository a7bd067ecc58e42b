"""StoreService lifecycle end to end: SIGTERM, restart on the same root, in-process server.

A SIGTERM stops the store cleanly and a restart (with SYNC_FLUSH) serves the
same messages and config files; ``create_server`` runs the service in-process
and shuts its store down with it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from boltmq.kernel.channels import channel
from boltmq.v1 import store_pb2, store_pb2_grpc
from services.store import MessageStore, StoreConfig
from services.store.server import create_server
from tests.integration.store_service_helpers import (
    ILLEGAL,
    OK,
    SEGMENT_BYTES,
    PutOutcome,
    Spawn,
    append,
    bodies,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    msg,
    outcomes,
    start_store,
)


def test_sigterm_is_clean_and_a_restart_serves_the_same_data(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    proc = start_store(spawn, root)
    stub = connect(proc)
    results = append(
        stub, *(msg("Keep", i % 3, f"m{i}".encode(), keys=[f"k{i}"]) for i in range(30))
    )
    stub.PutConfig(store_pb2.PutConfigRequest(name="consumerOffset.json", content=b'{"a": 1}'))
    pulls = [stub.Pull(store_pb2.PullRequest(topic="Keep", queue_id=q)) for q in range(3)]
    got = stub.Get(store_pb2.GetRequest(msg_id=results[7].msg_id))
    assert (root / "abort").exists()

    assert proc.stop() == 0
    assert not (root / "abort").exists()

    # Restarted with SYNC_FLUSH: appends go through the group-commit threads.
    again = connect(start_store(spawn, root, "flush_disk_type=SYNC_FLUSH"))
    assert [again.Pull(store_pb2.PullRequest(topic="Keep", queue_id=q)) for q in range(3)] == pulls
    assert again.Get(store_pb2.GetRequest(msg_id=results[7].msg_id)) == got
    assert bodies(
        again.QueryByKey(store_pb2.QueryByKeyRequest(topic="Keep", key="k9")).messages
    ) == [b"m9"]
    assert (
        again.GetConfig(store_pb2.GetConfigRequest(name="consumerOffset.json")).content
        == b'{"a": 1}'
    )
    synced = append(again, msg("Keep", 0, b"durable"), msg("", 0, b"bad"))
    assert [r.status for r in synced] == [OK, ILLEGAL] and synced[0].queue_offset == 10
    assert (
        again.Get(store_pb2.GetRequest(commitlog_offset=synced[0].commitlog_offset)).message.body
        == b"durable"
    )


def test_create_server_in_process(tmp_path: Path) -> None:
    config = StoreConfig(
        root_dir=tmp_path / "s", listen_port=0, mapped_file_size_commitlog=SEGMENT_BYTES
    )

    async def scenario() -> PutOutcome:
        server, port = await create_server(config)
        await server.start()
        async with channel(f"127.0.0.1:{port}") as chan:
            stub = store_pb2_grpc.StoreServiceStub(chan)
            sent = [msg("Local", 0, b"in-process")]
            response = await stub.Append(
                store_pb2.AppendRequest(messages=sent, born_host="10.1.2.3:4567")
            )
        await server.stop(None)
        return outcomes(response, sent)[0]

    result = asyncio.run(scenario())
    assert result.status == OK
    # The server's own store was shut down with it: clean, unlocked, data kept.
    assert not (config.root_dir / "abort").exists()
    with MessageStore(config) as store:
        record = store.look_message(result.commitlog_offset)
        assert record is not None and bytes(record.body) == b"in-process"
        assert record.born_host == "10.1.2.3:4567"
