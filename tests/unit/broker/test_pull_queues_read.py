"""PullProcessor._read_queues: the store is asked only of queues that may have news.

A queue the store watches from the pull's offset (a parked pull named it, no
arrival since) is answered with the store's last "nothing new" answer; the
others are asked of the store, and the answers are put back in the request's
order. The store here is a stand-in that records what it was asked. A queue
reset for the group is answered OFFSET_RESET without asking the store, until
the group pulls from the reset offset.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.pull_answer import QueuesAnswer, encode_pull_queues, pull_parts
from services.broker.arrivals.long_poll import LongPollHub
from services.broker.config import BrokerConfig
from services.broker.metadata.offset_reset import OffsetResets
from services.broker.pull.pull_processor import PullProcessor


class RecordingStore:
    """Answers PullQueues from ``queues`` ((topic, queue_id) -> records), noting each call."""

    def __init__(self, queues: dict[tuple[str, int], list[bytes]], answers_max: int = 1024) -> None:
        self.queues = queues
        self.asked: list[list[tuple[str, int, int]]] = []
        self.answers_max = answers_max
        """Answers at most this many pulls, as a store whose max_bytes ran out."""

    async def pull_queues_answer(self, request: store_pb2.PullQueuesRequest) -> QueuesAnswer:
        self.asked.append([(p.topic, p.queue_id, p.queue_offset) for p in request.pulls])
        answers = []
        for pull in request.pulls[: self.answers_max]:
            records = self.queues.get((pull.topic, pull.queue_id), [])
            found = records[pull.queue_offset :]
            status = message_pb2.FOUND if found else message_pb2.OFFSET_OVERFLOW_ONE
            answers.append(
                pull_parts(
                    store_pb2.PullResponse(
                        status=status,
                        next_begin_offset=pull.queue_offset + len(found),
                        max_offset=len(records),
                        record_count=len(found),
                    ),
                    found,
                )
            )
        return QueuesAnswer.parse(encode_pull_queues(answers))


def processor(
    store: RecordingStore, hub: LongPollHub, resets: OffsetResets | None = None
) -> PullProcessor:
    unused = cast(Any, None)  # topics, groups, offsets and role play no part in a read
    return PullProcessor(
        BrokerConfig(), unused, unused, unused, cast(Any, store), hub, unused, resets
    )


def read(
    pulls: list[broker_pb2.QueuePull],
    store: RecordingStore,
    hub: LongPollHub,
    resets: OffsetResets | None = None,
) -> store_pb2.PullQueuesResponse:
    async def scenario() -> QueuesAnswer:
        queues = [(p.topic, p.queue_id, p.queue_offset) for p in pulls]
        answer, idle = await processor(store, hub, resets)._read_queues(
            "g", pulls, queues, 0, 0, hub.tokens(queues)
        )
        assert idle == all(r.status == message_pb2.OFFSET_OVERFLOW_ONE for r in answer.responses)
        return answer

    answer = asyncio.run(scenario())
    parsed = store_pb2.PullQueuesResponse.FromString(answer.encoded)
    assert list(parsed.answers) == answer.responses
    return parsed


def watch(hub: LongPollHub, pulls: list[broker_pb2.QueuePull]) -> None:
    """Park the pulls once and let them time out: the store now watches their queues."""

    async def park() -> bool:
        return await hub.wait_any(
            [(p.topic, p.queue_id, p.queue_offset, hub.token(p.topic, p.queue_id)) for p in pulls],
            0.01,
        )

    assert asyncio.run(park()) is False


def pull(queue_id: int, offset: int) -> broker_pb2.QueuePull:
    return broker_pb2.QueuePull(topic="t", queue_id=queue_id, queue_offset=offset)


def test_only_queues_that_may_have_news_are_asked_and_answers_keep_the_request_order() -> None:
    store = RecordingStore({("t", 0): [b"a"], ("t", 1): [], ("t", 2): [b"b", b"c"]})
    hub = LongPollHub(max_parked=10)
    pulls = [pull(0, 1), pull(1, 0), pull(2, 2)]
    first = read(pulls, store, hub)  # nothing watched yet: every queue is asked
    assert store.asked == [[("t", 0, 1), ("t", 1, 0), ("t", 2, 2)]]
    watch(hub, pulls)
    assert read(pulls, store, hub) == first  # every queue watched and quiet: none asked
    assert len(store.asked) == 1
    store.queues[("t", 1)].append(b"new")
    hub.notify("t", 1, 1)  # the store reports the arrival
    answer = read(pulls, store, hub)
    assert store.asked[-1] == [("t", 1, 0)]
    assert [a.record_count for a in answer.answers] == [0, 1, 0]
    assert (answer.answers[0], answer.answers[2]) == (first.answers[0], first.answers[2])
    other = [pull(0, 0), pull(1, 1), pull(2, 2)]  # offsets the store watches not from
    read(other, store, hub)
    assert store.asked[-1] == [("t", 0, 0), ("t", 1, 1)]


def test_answers_stop_where_the_stores_stop() -> None:
    store = RecordingStore({("t", n): [b"x"] for n in range(4)})
    hub = LongPollHub(max_parked=10)
    pulls = [pull(0, 1), pull(1, 0), pull(2, 1), pull(3, 0)]
    read([pulls[0], pulls[2]], store, hub)  # queues 0 and 2 are quiet at offset 1
    watch(hub, [pulls[0], pulls[2]])
    store.asked.clear()
    store.answers_max = 1
    answer = read(pulls, store, hub)
    assert store.asked == [[("t", 1, 0), ("t", 3, 0)]]
    # queue 1 answered, queue 3 not (max_bytes ran out): the answer ends before it
    assert [a.status for a in answer.answers] == [
        message_pb2.OFFSET_OVERFLOW_ONE,
        message_pb2.FOUND,
        message_pb2.OFFSET_OVERFLOW_ONE,
    ]


def test_a_reset_queue_is_moved_until_the_group_pulls_from_the_reset_offset() -> None:
    store = RecordingStore({("t", 0): [b"a", b"b", b"c"], ("t", 1): [b"x"]})
    hub = LongPollHub(max_parked=10)
    resets = OffsetResets()
    resets.reset("g", "t", 0, 1)
    resets.reset("other-group", "t", 1, 0)  # another group's reset changes nothing here
    answer = read([pull(0, 3), pull(1, 1)], store, hub, resets)
    assert store.asked == [[("t", 1, 1)]]  # the reset queue is not read
    assert (answer.answers[0].status, answer.answers[0].next_begin_offset) == (
        message_pb2.OFFSET_RESET,
        1,
    )
    assert answer.answers[0].record_count == 0
    again = read([pull(0, 3)], store, hub, resets)  # still not where the reset put it
    assert again.answers[0].status == message_pb2.OFFSET_RESET
    moved = read([pull(0, 1)], store, hub, resets)  # the consumer followed: reset done
    assert (moved.answers[0].status, moved.answers[0].record_count) == (message_pb2.FOUND, 2)
    assert len(resets) == 1  # only the other group's is left
    after = read([pull(0, 3)], store, hub, resets)
    assert after.answers[0].status == message_pb2.OFFSET_OVERFLOW_ONE


def test_a_queue_this_broker_wrote_to_is_asked_again_before_the_store_reports_it() -> None:
    """The store's arrival report comes on the watch stream, after the append's answer:
    a pull right after a send must read the store, not the "nothing new" kept."""
    store = RecordingStore({("t", 0): [b"a"], ("t", 1): []})
    hub = LongPollHub(max_parked=10)
    pulls = [pull(0, 1), pull(1, 0)]
    first = read(pulls, store, hub)
    watch(hub, pulls)
    store.queues[("t", 0)].append(b"b")
    hub.written("t", 0)  # the broker's append was answered; no arrival reported yet
    answer = read(pulls, store, hub)
    assert store.asked[-1] == [("t", 0, 1)]
    assert [a.record_count for a in answer.answers] == [1, 0]
    assert answer.answers[1] == first.answers[1]


class WrittenDuringRead(RecordingStore):
    """A store whose answer leaves before an append the broker makes meanwhile."""

    def __init__(self, queues: dict[tuple[str, int], list[bytes]], hub: LongPollHub) -> None:
        super().__init__(queues)
        self.hub = hub

    async def pull_queues_answer(self, request: store_pb2.PullQueuesRequest) -> QueuesAnswer:
        answer = await super().pull_queues_answer(request)
        if len(self.asked) == 1:
            self.queues[("t", 0)].append(b"b")
            self.hub.written("t", 0)
        return answer


def test_a_nothing_new_read_while_the_broker_wrote_is_not_kept() -> None:
    hub = LongPollHub(max_parked=10)
    store = WrittenDuringRead({("t", 0): [b"a"]}, hub)
    pulls = [pull(0, 1)]
    assert read(pulls, store, hub).answers[0].record_count == 0  # read before the write
    watch(hub, pulls)
    answer = read(pulls, store, hub)
    assert len(store.asked) == 2  # the first answer was not kept
    assert answer.answers[0].record_count == 1
