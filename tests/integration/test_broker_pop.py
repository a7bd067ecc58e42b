"""POP consumption over BrokerService (ReceiveMessages, AckMessage, ChangeInvisibleDuration)
against a real registry, store and broker.

One cluster serves the module; each test uses topics and groups of its own. Timing
assertions only ever say "not early" (a message invisible until T is not received before
T); "received again" is a receive that waits for it.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from services.broker.pop.pop_service import IN_FLIGHT_MAX
from tests.integration.broker_fixtures import RPC_TIMEOUT_S, failure, msg, pull, send, upsert
from tests.integration.conftest import Cluster

INVISIBLE_MS = 600
"""Short enough that a redelivery test waits well under a second or two."""
WAIT_MS = 10_000
"""A receive that waits for something: it returns as soon as it has it."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(tmp_path_factory.mktemp("pop"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def stub(cluster: Cluster) -> Iterator[broker_pb2_grpc.BrokerServiceStub]:
    channel = sync_channel(cluster.broker.address)
    yield broker_pb2_grpc.BrokerServiceStub(channel)
    channel.close()


def receive(
    stub: broker_pb2_grpc.BrokerServiceStub,
    group: str,
    topic: str,
    *,
    max_messages: int = 32,
    invisible_ms: int = INVISIBLE_MS,
    wait_ms: int = 0,
    subscription: str = "*",
    fifo: bool = False,
) -> list[broker_pb2.ReceivedMessage]:
    response = stub.ReceiveMessages(
        broker_pb2.ReceiveMessagesRequest(
            group=group,
            topic=topic,
            subscription=subscription,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
            fifo=fifo,
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return list(response.messages)


def ack(stub: broker_pb2_grpc.BrokerServiceStub, group: str, topic: str, handle: str) -> None:
    stub.AckMessage(
        broker_pb2.AckMessageRequest(group=group, topic=topic, receipt_handle=handle),
        timeout=RPC_TIMEOUT_S,
    )


def ack_failure(
    stub: broker_pb2_grpc.BrokerServiceStub, group: str, topic: str, handle: str
) -> grpc.RpcError:
    return failure(
        stub.AckMessage,
        broker_pb2.AckMessageRequest(group=group, topic=topic, receipt_handle=handle),
    )


def change(
    stub: broker_pb2_grpc.BrokerServiceStub, group: str, topic: str, handle: str, ms: int
) -> broker_pb2.ChangeInvisibleDurationResponse:
    response: broker_pb2.ChangeInvisibleDurationResponse = stub.ChangeInvisibleDuration(
        broker_pb2.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, invisible_ms=ms
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return response


def produce(
    stub: broker_pb2_grpc.BrokerServiceStub,
    topic: str,
    bodies: list[bytes],
    queue_id: int = 0,
    **fields: object,
) -> None:
    for body in bodies:
        (outcome,) = send(stub, msg(topic, body, queue_id=queue_id, **fields))
        assert outcome.put_status == message_pb2.PUT_OK, outcome


def bodies(messages: list[broker_pb2.ReceivedMessage]) -> list[bytes]:
    return [m.message.body for m in messages]


def test_received_messages_are_acked_once_and_never_delivered_again(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopBasic", queues=2)
    produce(stub, "PopBasic", [b"a0", b"a1"], queue_id=0)
    produce(stub, "PopBasic", [b"b0"], queue_id=1)
    got = receive(stub, "pop-basic", "PopBasic", max_messages=2, invisible_ms=60_000)
    assert len(got) == 2
    got += receive(stub, "pop-basic", "PopBasic", invisible_ms=60_000)
    assert sorted(bodies(got)) == [b"a0", b"a1", b"b0"]
    assert {m.delivery_attempt for m in got} == {1}
    assert len({m.receipt_handle for m in got}) == 3
    assert all(m.invisible_until_ms > time.time() * 1000 for m in got)
    for m in got:
        ack(stub, "pop-basic", "PopBasic", m.receipt_handle)
    assert receive(stub, "pop-basic", "PopBasic", wait_ms=200) == []
    error = ack_failure(stub, "pop-basic", "PopBasic", got[0].receipt_handle)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "acked or dead-lettered already" in (error.details() or "")


def test_an_unacked_message_comes_back_after_its_invisible_time_with_the_next_attempt(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopRedeliver", queues=1)
    produce(stub, "PopRedeliver", [b"m"])
    (first,) = receive(stub, "pop-redeliver", "PopRedeliver")
    assert first.delivery_attempt == 1
    (second,) = receive(stub, "pop-redeliver", "PopRedeliver", wait_ms=WAIT_MS)
    assert time.time() * 1000 >= first.invisible_until_ms  # not early
    assert second.message.body == b"m" and second.delivery_attempt == 2
    assert second.message.msg_id == first.message.msg_id
    error = ack_failure(stub, "pop-redeliver", "PopRedeliver", first.receipt_handle)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "stale" in (error.details() or "")
    ack(stub, "pop-redeliver", "PopRedeliver", second.receipt_handle)  # the new one holds it


def test_changing_the_invisible_duration_extends_it_and_retires_the_old_handle(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopChange", queues=1)
    produce(stub, "PopChange", [b"m"])
    (got,) = receive(stub, "pop-change", "PopChange", invisible_ms=INVISIBLE_MS)
    changed = change(stub, "pop-change", "PopChange", got.receipt_handle, 60_000)
    assert changed.receipt_handle != got.receipt_handle
    assert changed.invisible_until_ms >= got.invisible_until_ms + 50_000
    time.sleep(INVISIBLE_MS * 2 / 1000)  # past the first invisible time
    assert receive(stub, "pop-change", "PopChange") == []
    error = ack_failure(stub, "pop-change", "PopChange", got.receipt_handle)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    ack(stub, "pop-change", "PopChange", changed.receipt_handle)
    assert receive(stub, "pop-change", "PopChange", wait_ms=200) == []


def test_a_shorter_invisible_duration_brings_the_message_back_sooner(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopShorten", queues=1)
    produce(stub, "PopShorten", [b"m"])
    (got,) = receive(stub, "pop-shorten", "PopShorten", invisible_ms=600_000)
    change(stub, "pop-shorten", "PopShorten", got.receipt_handle, 200)
    (again,) = receive(stub, "pop-shorten", "PopShorten", wait_ms=WAIT_MS)
    assert again.delivery_attempt == 2


def test_after_the_group_s_last_attempt_the_message_goes_to_its_dead_letter_queue(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    stub.UpsertGroup(
        broker_pb2.UpsertGroupRequest(group="pop-dlq", retry_max_times=1), timeout=RPC_TIMEOUT_S
    )
    upsert(stub, "PopDlq", queues=1)
    produce(stub, "PopDlq", [b"doomed"], properties={"k": "v"})
    attempts = [receive(stub, "pop-dlq", "PopDlq")[0].delivery_attempt]
    attempts.append(receive(stub, "pop-dlq", "PopDlq", wait_ms=WAIT_MS)[0].delivery_attempt)
    assert attempts == [1, 2]  # retry_max_times 1: two deliveries
    assert receive(stub, "pop-dlq", "PopDlq", wait_ms=INVISIBLE_MS * 3) == []
    letters = stub.ListDeadLetters(
        broker_pb2.ListDeadLettersRequest(group="pop-dlq"), timeout=RPC_TIMEOUT_S
    )
    (letter,) = letters.messages
    assert letter.topic == "%DLQ%pop-dlq" and letter.body == b"doomed"
    assert letter.properties["RETRY_TOPIC"] == "PopDlq" and letter.properties["k"] == "v"


def test_a_consumer_can_give_up_on_a_delivery_and_send_it_to_the_dead_letter_queue(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopGiveUp", queues=1)
    produce(stub, "PopGiveUp", [b"bad", b"good"])
    bad, good = receive(stub, "pop-give-up", "PopGiveUp", invisible_ms=INVISIBLE_MS)
    request = broker_pb2.ForwardToDeadLetterRequest(
        group="pop-give-up", topic="PopGiveUp", receipt_handle=bad.receipt_handle
    )
    stub.ForwardToDeadLetter(request, timeout=RPC_TIMEOUT_S)
    assert failure(stub.ForwardToDeadLetter, request).code() == grpc.StatusCode.FAILED_PRECONDITION
    error = ack_failure(stub, "pop-give-up", "PopGiveUp", bad.receipt_handle)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    again = receive(stub, "pop-give-up", "PopGiveUp", wait_ms=WAIT_MS)
    assert bodies(again) == [b"good"]  # the dead letter is never delivered again
    letters = stub.ListDeadLetters(
        broker_pb2.ListDeadLettersRequest(group="pop-give-up"), timeout=RPC_TIMEOUT_S
    )
    assert [m.body for m in letters.messages] == [b"bad"]


def fifo_message(topic: str, body: bytes, message_group: str) -> message_pb2.Message:
    return msg(topic, body, queue_id=0, properties={"__SHARDINGKEY": message_group})


def test_a_fifo_group_gets_one_message_of_each_message_group_at_a_time_in_order(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    stub.UpsertGroup(
        broker_pb2.UpsertGroupRequest(group="pop-fifo", consume_message_orderly=True),
        timeout=RPC_TIMEOUT_S,
    )
    upsert(stub, "PopFifo", queues=1)
    for body, key in [(b"a1", "A"), (b"b1", "B"), (b"a2", "A"), (b"a3", "A"), (b"b2", "B")]:
        send(stub, fifo_message("PopFifo", body, key))
    produce(stub, "PopFifo", [b"free"])  # no message group: not ordered
    first = receive(stub, "pop-fifo", "PopFifo", invisible_ms=3000)
    assert bodies(first) == [b"a1", b"b1", b"free"]
    assert receive(stub, "pop-fifo", "PopFifo", wait_ms=200) == []  # a2, b2 wait
    a1, b1, free = first
    ack(stub, "pop-fifo", "PopFifo", a1.receipt_handle)
    ack(stub, "pop-fifo", "PopFifo", free.receipt_handle)
    (a2,) = receive(stub, "pop-fifo", "PopFifo", invisible_ms=600_000)
    assert a2.message.body == b"a2"
    # b1 not acked: it comes back, and b2 is not delivered before it is acked
    again = receive(stub, "pop-fifo", "PopFifo", wait_ms=WAIT_MS)
    assert [(m.message.body, m.delivery_attempt) for m in again] == [(b"b1", 2)]
    ack(stub, "pop-fifo", "PopFifo", again[0].receipt_handle)
    got = receive(stub, "pop-fifo", "PopFifo", wait_ms=WAIT_MS)
    assert bodies(got) == [b"b2"]  # a3 still waits for a2
    ack(stub, "pop-fifo", "PopFifo", got[0].receipt_handle)
    ack(stub, "pop-fifo", "PopFifo", a2.receipt_handle)
    (a3,) = receive(stub, "pop-fifo", "PopFifo", wait_ms=WAIT_MS)
    assert a3.message.body == b"a3"


def test_an_ack_wakes_a_fifo_receive_waiting_for_the_next_message_of_the_group(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopFifoWake", queues=1)
    for body in (b"1", b"2"):
        send(stub, fifo_message("PopFifoWake", body, "K"))
    (one,) = receive(stub, "pop-fifo-wake", "PopFifoWake", fifo=True, invisible_ms=600_000)
    waited: list[list[broker_pb2.ReceivedMessage]] = []
    waiter = threading.Thread(
        target=lambda: waited.append(
            receive(stub, "pop-fifo-wake", "PopFifoWake", fifo=True, wait_ms=20_000)
        )
    )
    waiter.start()
    time.sleep(0.3)  # let it park (if it has not, it finds "2" at once: the same outcome)
    ack(stub, "pop-fifo-wake", "PopFifoWake", one.receipt_handle)
    waiter.join(timeout=RPC_TIMEOUT_S)
    assert [bodies(w) for w in waited] == [[b"2"]]


def test_tags_filter_what_is_received(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    upsert(stub, "PopTags", queues=1)
    for body, tag in [(b"1", "A"), (b"2", "B"), (b"3", "A"), (b"4", "C")]:
        send(stub, msg("PopTags", body, queue_id=0, tags=tag))
    got = receive(stub, "pop-tags", "PopTags", subscription="A || C", invisible_ms=60_000)
    assert bodies(got) == [b"1", b"3", b"4"]
    assert receive(stub, "pop-tags", "PopTags", subscription="A || C", wait_ms=200) == []


def test_a_receive_waits_for_an_arrival(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    upsert(stub, "PopWait", queues=2)
    waited: list[list[broker_pb2.ReceivedMessage]] = []
    waiter = threading.Thread(
        target=lambda: waited.append(receive(stub, "pop-wait", "PopWait", wait_ms=20_000))
    )
    waiter.start()
    time.sleep(0.3)
    produce(stub, "PopWait", [b"late"], queue_id=1)
    waiter.join(timeout=RPC_TIMEOUT_S)
    assert [bodies(w) for w in waited] == [[b"late"]]


def test_pop_and_pull_groups_consume_one_topic_side_by_side(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopBeside", queues=1)
    produce(stub, "PopBeside", [b"1", b"2", b"3"])
    committed = pull(stub, "PopBeside", consumer_group="pull-beside", commit_offset=1)
    assert [m.body for m in committed.messages] == [b"1", b"2", b"3"]
    popped = receive(stub, "pop-beside", "PopBeside", invisible_ms=60_000)
    assert bodies(popped) == [b"1", b"2", b"3"]
    for m in popped:
        ack(stub, "pop-beside", "PopBeside", m.receipt_handle)
    offset = stub.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="pull-beside", topic="PopBeside", queue_id=0),
        timeout=RPC_TIMEOUT_S,
    )
    assert (offset.found, offset.offset) == (True, 1)  # the pull group's, untouched
    again = pull(stub, "PopBeside", consumer_group="pull-beside", offset=1)
    assert [m.body for m in again.messages] == [b"2", b"3"]
    other = receive(stub, "pop-beside-2", "PopBeside", invisible_ms=60_000)
    assert bodies(other) == [b"1", b"2", b"3"]  # each POP group has its own state


def ready_stub(address: str) -> broker_pb2_grpc.BrokerServiceStub:
    """A stub of the (restarted) broker at ``address`` once its channel is connected: the
    first connection to a process just started may take long on a loaded machine."""
    channel = sync_channel(address)
    grpc.channel_ready_future(channel).result(timeout=60)
    return broker_pb2_grpc.BrokerServiceStub(channel)


def test_a_handle_survives_broker_and_store_restarts(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub
) -> None:
    upsert(stub, "PopRestart", queues=1)
    produce(stub, "PopRestart", [b"1", b"2"])
    one, two = receive(stub, "pop-restart", "PopRestart", invisible_ms=600_000)
    cluster.restart_broker()
    fresh = ready_stub(cluster.broker.address)
    ack(fresh, "pop-restart", "PopRestart", one.receipt_handle)
    cluster.restart_store()
    cluster.restart_broker()
    fresh = ready_stub(cluster.broker.address)
    error = ack_failure(fresh, "pop-restart", "PopRestart", one.receipt_handle)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    ack(fresh, "pop-restart", "PopRestart", two.receipt_handle)
    assert receive(fresh, "pop-restart", "PopRestart", wait_ms=200) == []


def forged(handle: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)))
    raw[9] ^= 0x01  # another token
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def test_forged_and_misused_handles_are_refused(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopForge", queues=1)
    produce(stub, "PopForge", [b"m"])
    (got,) = receive(stub, "pop-forge", "PopForge", invisible_ms=600_000)
    for group, topic, handle in [
        ("pop-forge", "PopForge", forged(got.receipt_handle)),
        ("pop-forge-other", "PopForge", got.receipt_handle),
        ("pop-forge", "PopBasic", got.receipt_handle),
        ("pop-forge", "PopForge", "garbage"),
        ("pop-forge", "PopForge", ""),
    ]:
        error = ack_failure(stub, group, topic, handle)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (group, topic, handle)
        assert (error.details() or "").startswith("receipt_handle: ")
    ack(stub, "pop-forge", "PopForge", got.receipt_handle)  # the real one still works


@pytest.mark.parametrize(
    ("fields", "code", "why"),
    [
        ({"group": "bad group!"}, grpc.StatusCode.INVALID_ARGUMENT, "group"),
        ({"group": ""}, grpc.StatusCode.INVALID_ARGUMENT, "group"),
        ({"topic": "no/such"}, grpc.StatusCode.INVALID_ARGUMENT, "topic"),
        ({"topic": "PopNoSuchTopic"}, grpc.StatusCode.NOT_FOUND, "topic"),
        ({"max_messages": 0}, grpc.StatusCode.INVALID_ARGUMENT, "max_messages"),
        ({"max_messages": 33}, grpc.StatusCode.INVALID_ARGUMENT, "max_messages"),
        ({"max_messages": -1}, grpc.StatusCode.INVALID_ARGUMENT, "max_messages"),
        ({"invisible_ms": 0}, grpc.StatusCode.INVALID_ARGUMENT, "invisible_ms"),
        ({"invisible_ms": -5}, grpc.StatusCode.INVALID_ARGUMENT, "invisible_ms"),
        ({"invisible_ms": 10**12}, grpc.StatusCode.INVALID_ARGUMENT, "invisible_ms"),
        ({"wait_ms": -1}, grpc.StatusCode.INVALID_ARGUMENT, "wait_ms"),
        ({"wait_ms": 10**9}, grpc.StatusCode.INVALID_ARGUMENT, "wait_ms"),
        ({"subscription": "A || || B"}, grpc.StatusCode.INVALID_ARGUMENT, "tag_filter"),
    ],
)
def test_bad_receives_are_refused_naming_the_field(
    stub: broker_pb2_grpc.BrokerServiceStub,
    fields: dict[str, object],
    code: grpc.StatusCode,
    why: str,
) -> None:
    upsert(stub, "PopBad", queues=1)
    values: dict[str, object] = dict(
        group="pop-bad", topic="PopBad", subscription="*", max_messages=1, invisible_ms=1000
    )
    values.update(fields)
    error = failure(stub.ReceiveMessages, broker_pb2.ReceiveMessagesRequest(**values))  # type: ignore[arg-type]
    assert error.code() == code, error.details()
    assert (error.details() or "").startswith(why), error.details()


def test_bad_changes_are_refused(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    upsert(stub, "PopBadChange", queues=1)
    produce(stub, "PopBadChange", [b"m"])
    (got,) = receive(stub, "pop-bad-change", "PopBadChange", invisible_ms=600_000)
    for ms in (0, -1, 10**12):
        error = failure(
            stub.ChangeInvisibleDuration,
            broker_pb2.ChangeInvisibleDurationRequest(
                group="pop-bad-change",
                topic="PopBadChange",
                receipt_handle=got.receipt_handle,
                invisible_ms=ms,
            ),
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error.details() or "").startswith("invisible_ms")
    ack(stub, "pop-bad-change", "PopBadChange", got.receipt_handle)  # unchanged, still good


def test_deleting_a_topic_forgets_its_pop_state(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    upsert(stub, "PopDeleted", queues=1)
    produce(stub, "PopDeleted", [b"m"])
    (got,) = receive(stub, "pop-deleted", "PopDeleted", invisible_ms=600_000)

    def pop_state() -> bytes:
        documents = stub.GetMetadata(broker_pb2.GetMetadataRequest(), timeout=RPC_TIMEOUT_S)
        return bytes(documents.documents["popState.json"])

    assert b"PopDeleted@pop-deleted" in pop_state()
    stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic="PopDeleted"), timeout=RPC_TIMEOUT_S)
    assert b"PopDeleted" not in pop_state()
    upsert(stub, "PopDeleted", queues=1)
    error = ack_failure(stub, "pop-deleted", "PopDeleted", got.receipt_handle)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_a_queue_with_as_many_in_flight_messages_as_allowed_delivers_more_after_an_ack(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopFull", queues=1)
    count = IN_FLIGHT_MAX + 1
    for start in range(0, count, 512):
        batch = [
            msg("PopFull", b"%d" % i, queue_id=0) for i in range(start, min(count, start + 512))
        ]
        assert {o.put_status for o in send(stub, *batch)} == {message_pb2.PUT_OK}
    held: list[broker_pb2.ReceivedMessage] = []
    while len(held) < IN_FLIGHT_MAX:
        got = receive(stub, "pop-full", "PopFull", invisible_ms=600_000)
        assert got, f"only {len(held)} received"
        held += got
    assert len(held) == IN_FLIGHT_MAX
    assert receive(stub, "pop-full", "PopFull", wait_ms=500) == []  # the last one waits
    ack(stub, "pop-full", "PopFull", held[0].receipt_handle)
    (last,) = receive(stub, "pop-full", "PopFull", wait_ms=WAIT_MS)
    assert last.message.body == b"%d" % IN_FLIGHT_MAX


@pytest.mark.parametrize(
    ("group", "topic", "field"),
    [("bad group!", "PopBad", "group"), ("", "PopBad", "group"), ("pop-bad", "a/b", "topic")],
)
def test_acks_changes_and_dead_letters_with_bad_names_are_refused_naming_the_field(
    stub: broker_pb2_grpc.BrokerServiceStub, group: str, topic: str, field: str
) -> None:
    for call, request in [
        (
            stub.AckMessage,
            broker_pb2.AckMessageRequest(group=group, topic=topic, receipt_handle="x"),
        ),
        (
            stub.ChangeInvisibleDuration,
            broker_pb2.ChangeInvisibleDurationRequest(
                group=group, topic=topic, receipt_handle="x", invisible_ms=1000
            ),
        ),
        (
            stub.ForwardToDeadLetter,
            broker_pb2.ForwardToDeadLetterRequest(group=group, topic=topic, receipt_handle="x"),
        ),
    ]:
        error = failure(call, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error.details() or "").startswith(field), error.details()


def test_a_group_with_a_committed_offset_starts_receiving_there(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "PopFromCommit", queues=1)
    produce(stub, "PopFromCommit", [b"0", b"1", b"2"])
    stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(
            group="pop-from-commit", topic="PopFromCommit", queue_id=0, offset=2
        ),
        timeout=RPC_TIMEOUT_S,
    )
    got = receive(stub, "pop-from-commit", "PopFromCommit", invisible_ms=60_000)
    assert bodies(got) == [b"2"]
    assert receive(stub, "pop-from-commit", "PopFromCommit", wait_ms=300) == []
    produce(stub, "PopFromCommit", [b"3"])
    assert bodies(receive(stub, "pop-from-commit", "PopFromCommit", wait_ms=WAIT_MS)) == [b"3"]
