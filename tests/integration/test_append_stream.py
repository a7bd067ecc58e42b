"""StoreService.AppendStream and the broker's AppendStream client, against real store processes.

The stream must store exactly what the unary Append stores, answer each
request by its id (several carried in one stream message too, as the broker
coalesces them), answer a refused request with the unary call's code and
text while staying open, let SYNC_FLUSH appends overtake each other, and on
the broker's side turn a store that went away into StoreUnavailable and
reconnect on the next append.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.message import Message
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from boltmq.wire.record_batch import RecordBatch
from services.broker.errors import InvalidArgument, StoreUnavailable
from services.broker.store.store_client import StoreClient
from tests.integration.procs import ServiceProcess

SMALL = (
    "mapped_file_size_commitlog=1048576",
    "mapped_file_size_consume_queue=60000",
    "max_hash_slot_num=1000",
    "max_index_num=4000",
)
TIMEOUT_MS = 10_000

Spawn = Callable[..., ServiceProcess]


class OpenStream:
    """A blocking AppendStream: ``send`` requests, ``receive`` responses in arrival order."""

    def __init__(self, address: str) -> None:
        self._channel = sync_channel(address)
        self._requests: queue.Queue[store_pb2.AppendStreamRequest | None] = queue.Queue()
        self._responses = store_pb2_grpc.StoreServiceStub(self._channel).AppendStream(
            iter(self._requests.get, None), timeout=30
        )

    def send(self, request_id: int, append: store_pb2.AppendRequest) -> None:
        self.send_message(store_pb2.AppendStreamRequest(id=request_id, append=append))

    def send_message(self, request: store_pb2.AppendStreamRequest) -> None:
        self._requests.put(request)

    def receive(self) -> store_pb2.AppendStreamResponse:
        response: store_pb2.AppendStreamResponse = next(self._responses)
        return response

    def close(self) -> None:
        self._requests.put(None)
        assert list(self._responses) == []  # nothing left unanswered
        self._channel.close()


@pytest.fixture
def open_stream() -> Iterator[Callable[[ServiceProcess], OpenStream]]:
    streams: list[OpenStream] = []

    def factory(proc: ServiceProcess) -> OpenStream:
        streams.append(OpenStream(proc.address))
        return streams[-1]

    yield factory
    for stream in streams:
        stream.close()


def records(topic: str, *bodies: bytes) -> store_pb2.AppendRequest:
    encoded = b"".join(Message(topic, body).to_record() for body in bodies)
    return store_pb2.AppendRequest(
        records=encoded, record_count=len(bodies), topic=topic, queue_id=0
    )


def stored_bodies(address: str, topic: str) -> list[bytes]:
    with sync_channel(address) as chan:
        pulled = store_pb2_grpc.StoreServiceStub(chan).Pull(
            store_pb2.PullRequest(topic=topic, queue_id=0, max_messages=1000)
        )
    return [m.body for m in pulled.messages]


def test_answers_by_id_refusals_keep_the_stream_open(
    spawn: Spawn, open_stream, tmp_path: Path
) -> None:
    store = spawn("store", f"root_dir={tmp_path / 's'}", *SMALL)
    stream = open_stream(store)
    stream.send(7, records("T", b"a", b"b"))
    stream.send(
        8, store_pb2.AppendRequest(messages=[message_pb2.Message(topic="T")], born_host="nonsense")
    )
    stream.send(9, store_pb2.AppendRequest(records=b"x" * 10, record_count=0, topic="T"))
    stream.send(10, store_pb2.AppendRequest(messages=[message_pb2.Message(topic="T", body=b"c")]))
    answers = {r.id: r for r in (stream.receive() for _ in range(4))}

    assert sorted(answers) == [7, 8, 9, 10]
    first, last = answers[7], answers[10]
    assert first.error_code == 0 and list(first.append.statuses) == [message_pb2.PUT_OK] * 2
    assert list(first.append.queue_offsets) == [0, 1]
    assert last.error_code == 0 and list(last.append.queue_offsets) == [2]
    assert answers[8].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[8].error.startswith("born_host: ")
    assert answers[9].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[9].error.startswith("record_count: ")
    assert stored_bodies(store.address, "T") == [b"a", b"b", b"c"]  # the refused stored nothing


def test_sync_flush_appends_are_all_answered(spawn: Spawn, open_stream, tmp_path: Path) -> None:
    store = spawn("store", f"root_dir={tmp_path / 's'}", "flush_disk_type=SYNC_FLUSH", *SMALL)
    stream = open_stream(store)
    for request_id in range(1, 41):
        stream.send(request_id, records("S", f"m{request_id}".encode()))
    answers = [stream.receive() for _ in range(40)]

    assert sorted(a.id for a in answers) == list(range(1, 41))
    assert all(
        a.error_code == 0 and list(a.append.statuses) == [message_pb2.PUT_OK] for a in answers
    )
    assert sorted(q for a in answers for q in a.append.queue_offsets) == list(range(40))
    assert sorted(stored_bodies(store.address, "S")) == sorted(
        f"m{i}".encode() for i in range(1, 41)
    )


def batch(topic: str, *bodies: bytes) -> RecordBatch:
    request = records(topic, *bodies)
    return RecordBatch(request.records, request.record_count, topic, 0)


def test_broker_client_fails_clearly_and_reconnects(spawn: Spawn, tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = spawn("store", f"root_dir={root}", *SMALL)

    async def scenario() -> None:
        client = StoreClient(store.address, TIMEOUT_MS)
        try:
            appended = await asyncio.gather(
                *(client.append_records(batch("B", b"%d" % i), "") for i in range(20))
            )
            assert sorted(q for a in appended for q in a.queue_offsets) == list(range(20))
            with pytest.raises(InvalidArgument, match="^born_host: "):
                await client.append_records(batch("B", b"x"), "nonsense")

            store.kill()
            with pytest.raises(StoreUnavailable, match=store.address):
                await client.append_records(batch("B", b"lost"), "")
            await asyncio.to_thread(restart, store)
            await client.wait_until_serving(30)
            again = await client.append_records(batch("B", b"after"), "")
            assert list(again.queue_offsets) == [20]
        finally:
            await client.close()

    asyncio.run(scenario())
    assert stored_bodies(store.address, "B")[-1] == b"after"


def restart(proc: ServiceProcess) -> None:
    """Start a killed process again on the same port."""
    proc.requested_port = proc.port
    proc.start()


def test_concurrent_appends_share_one_stream(spawn: Spawn, tmp_path: Path) -> None:
    """Many appends from many tasks at once: each gets its own answer, nothing is mixed up."""
    store = spawn("store", f"root_dir={tmp_path / 's'}", *SMALL)
    bodies = [f"body-{i}".encode() for i in range(200)]

    async def scenario() -> list[store_pb2.AppendResponse]:
        client = StoreClient(store.address, TIMEOUT_MS)
        try:
            return await asyncio.gather(
                *(client.append_records(batch("C", body), "") for body in bodies)
            )
        finally:
            await client.close()

    appended = asyncio.run(scenario())
    with sync_channel(store.address) as chan:
        stub = store_pb2_grpc.StoreServiceStub(chan)
        for body, answer in zip(bodies, appended, strict=True):
            got = stub.Get(store_pb2.GetRequest(commitlog_offset=answer.commitlog_offsets[0]))
            assert got.message.body == body  # each answer names its own message
    assert sorted(stored_bodies(store.address, "C")) == sorted(bodies)


def test_shutdown_ends_an_open_stream_without_waiting_out_the_grace(
    spawn: Spawn, tmp_path: Path
) -> None:
    """SIGTERM with a broker's stream open: answered appends stay answered, the stream
    ends normally, and the store exits cleanly (a held stream would keep it for 60 s,
    past the launcher's 20 s wait, and the exit code would be SIGKILL's)."""
    store = spawn("store", f"root_dir={tmp_path / 's'}", "shutdown_grace_ms=60000", *SMALL)
    stream = OpenStream(store.address)
    stream.send(1, records("G", b"before"))
    assert stream.receive().error_code == 0
    assert store.stop() == 0
    with pytest.raises(StopIteration):
        stream.receive()


def test_a_broker_gone_mid_stream_leaves_the_store_quiet_and_serving(
    spawn: Spawn, tmp_path: Path
) -> None:
    """The broker's stream dies with SYNC_FLUSH answers still owed: the appends are kept,
    the undeliverable answers are dropped without a traceback, the store serves on."""
    store = spawn("store", f"root_dir={tmp_path / 's'}", "flush_disk_type=SYNC_FLUSH", *SMALL)
    with sync_channel(store.address) as chan:
        requests = (
            store_pb2.AppendStreamRequest(id=i, append=records("Gone", b"%d" % i))
            for i in range(300)
        )
        stub = store_pb2_grpc.StoreServiceStub(chan)
        call = stub.AppendStream(requests)
        first = next(call)  # the stream is open and answering
        call.cancel()
        kept = stub.Get(store_pb2.GetRequest(commitlog_offset=first.append.commitlog_offsets[0]))
        assert kept.message.body == b"%d" % first.id
        after = stub.Append(records("Gone", b"after"))
    assert list(after.statuses) == [message_pb2.PUT_OK]
    assert store.stop() == 0
    assert "Traceback" not in store.log()


def test_appends_in_one_stream_message_are_each_answered_by_id(
    spawn: Spawn, open_stream, tmp_path: Path
) -> None:
    """``more``: several appends in one message, each answered as if it came alone; one
    that nests ``more`` of its own is refused alone and the stream stays open."""
    store = spawn("store", f"root_dir={tmp_path / 's'}", *SMALL)
    stream = open_stream(store)
    nested = store_pb2.AppendStreamRequest(
        id=23,
        append=records("M", b"nested"),
        more=[store_pb2.AppendStreamRequest(id=24, append=records("M", b"x"))],
    )
    stream.send_message(
        store_pb2.AppendStreamRequest(
            id=20,
            append=records("M", b"a", b"b"),
            more=[
                store_pb2.AppendStreamRequest(id=21, append=records("M", b"c")),
                store_pb2.AppendStreamRequest(
                    id=22, append=store_pb2.AppendRequest(records=b"x" * 10, topic="M")
                ),
                nested,
                store_pb2.AppendStreamRequest(id=25, append=records("M", b"d")),
            ],
        )
    )
    response = stream.receive()  # answered at once (ASYNC_FLUSH): one message for all
    answers = {a.id: a for a in (response, *response.more)}
    assert sorted(answers) == [20, 21, 22, 23, 25]
    assert all(not a.more for a in response.more)
    assert list(answers[20].append.queue_offsets) == [0, 1]
    assert list(answers[21].append.queue_offsets) == [2]
    assert answers[22].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[23].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[23].error.startswith("more: ")
    assert list(answers[25].append.queue_offsets) == [3]
    stream.send(26, records("M", b"e"))  # still open
    assert list(stream.receive().append.queue_offsets) == [4]
    assert stored_bodies(store.address, "M") == [b"a", b"b", b"c", b"d", b"e"]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_the_broker_coalesces_appends_that_queue_behind_a_write(
    spawn: Spawn, tmp_path: Path, flush: str
) -> None:
    """Appends of many tasks at once leave in fewer stream messages than appends, and each
    still gets its own answer (answered together, or one by one under SYNC_FLUSH)."""
    store = spawn("store", f"root_dir={tmp_path / 's'}", f"flush_disk_type={flush}", *SMALL)
    bodies = [f"coalesced-{i}".encode() for i in range(300)]

    async def scenario() -> tuple[list[store_pb2.AppendResponse], tuple[int, int]]:
        client = StoreClient(store.address, TIMEOUT_MS)
        try:
            appended = await asyncio.gather(
                *(client.append_records(batch("K", body), "") for body in bodies)
            )
            return appended, client.appends_written
        finally:
            await client.close()

    appended, (messages, appends) = asyncio.run(scenario())
    assert appends == len(bodies) and messages < appends
    with sync_channel(store.address) as chan:
        stub = store_pb2_grpc.StoreServiceStub(chan)
        for body, answer in zip(bodies, appended, strict=True):
            got = stub.Get(store_pb2.GetRequest(commitlog_offset=answer.commitlog_offsets[0]))
            assert got.message.body == body
    assert sorted(q for a in appended for q in a.queue_offsets) == list(range(len(bodies)))


def test_appends_written_at_once_are_each_answered_and_fail_alone(
    spawn: Spawn, tmp_path: Path
) -> None:
    """``append_runs``: the batches of several topics written at once, one Append of runs
    on the stream (the store appends them in one call), answered with an entry a record
    in order; a batch of a topic no append may name is refused record by record, alone,
    and a store that went away fails the call. Each batch's queue is told to
    ``on_written``, answered or not."""
    store = spawn("store", f"root_dir={tmp_path / 's'}", *SMALL)
    topics = [f"Many{n}" for n in range(5)]
    written: list[tuple[str, int]] = []

    async def scenario() -> tuple[store_pb2.AppendResponse, Exception | None]:
        client = StoreClient(
            store.address, TIMEOUT_MS, on_written=lambda *queue: written.append(queue)
        )
        try:
            batches = [batch(t, t.encode()) for t in topics]
            bad = RecordBatch(batches[0].records, 1, "no such topic!", 0)
            answer = await client.append_runs([*batches[:2], bad, *batches[2:]], "")
            store.kill()
            try:
                await client.append_runs(batches[:2], "")
            except Exception as exc:
                return answer, exc
            return answer, None
        finally:
            await client.close()

    answer, lost = asyncio.run(scenario())
    ok, illegal = message_pb2.PUT_OK, message_pb2.MESSAGE_ILLEGAL
    assert list(answer.statuses) == [ok, ok, illegal, ok, ok, ok]
    assert list(answer.queue_offsets) == [0, 0, -1, 0, 0, 0]  # each the first of its topic
    assert "no such topic!" in answer.errors[2]
    assert isinstance(lost, StoreUnavailable)
    many = [(t, 0) for t in topics]
    assert written == [*many[:2], ("no such topic!", 0), *many[2:], *many[:2]]
    restart(store)
    for topic in topics:
        assert stored_bodies(store.address, topic) == [topic.encode()]
