"""SendBatcher with a fake call: who leaves alone, who leaves together, who gets what.

The fake call records each request and, when told, blocks until the test
releases it, so a call is "in flight" exactly as long as the test says; threads
are observed through ``queued`` (no sleeps, no timing thresholds).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence

import pytest

from boltmq import send_batcher
from boltmq.send_batcher import BatchMismatch, SendBatcher
from tests.waiting import WAIT_S, wait_until

KEY = ("broker-a:10911", "Orders", -1)


class FakeCall:
    """Parts are bytes of one-byte records; answers ``"<record>"`` per record of each
    part (or, for a part in ``refused``, that exception); can hold calls or fail them.
    Each request is kept as (the parts joined, their record count, the timeout)."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, int, float]] = []
        self.hold = False
        self.started = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.error: BaseException | None = None
        self.short = False
        self.refused: dict[bytes, BaseException] = {}
        self.outcomes_missing = False

    def __call__(
        self, parts: Sequence[bytes], timeout_s: float
    ) -> Sequence[Sequence[str] | BaseException]:
        joined = b"".join(parts)
        self.requests.append((joined, len(joined), timeout_s))
        self.started.release()
        if self.hold:
            self.release.acquire()
        if self.error is not None:
            raise self.error
        outcomes: list[Sequence[str] | BaseException] = [
            self.refused.get(part) or [chr(b) for b in part] for part in parts
        ]
        if self.short:
            last = outcomes[-1]
            assert not isinstance(last, BaseException)
            outcomes[-1] = last[:-1]
        return outcomes[:-1] if self.outcomes_missing else outcomes


class Sender(threading.Thread):
    """One thread's send; keeps its results or error."""

    def __init__(
        self,
        batcher: SendBatcher[bytes, str],
        call: FakeCall,
        records: bytes,
        key: object = KEY,
        lanes: int = 1,
    ) -> None:
        super().__init__(daemon=True)
        self.batcher, self.call, self.records, self.key = batcher, call, records, key
        self.lanes = lanes
        self.results: Sequence[str] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            size = len(self.records)
            self.results = self.batcher.send(
                self.key, self.records, size, size, 1000.0, self.call, self.lanes
            )
        except BaseException as exc:
            self.error = exc


def clock() -> float:
    return 990.0


def start_in_flight(batcher: SendBatcher[bytes, str], call: FakeCall, records: bytes) -> Sender:
    """A send whose call is in flight until ``call.release`` is released."""
    call.hold = True
    first = Sender(batcher, call, records)
    first.start()
    call.started.acquire()
    return first


def queue_behind(batcher: SendBatcher[bytes, str], call: FakeCall, *records: bytes) -> list[Sender]:
    """Sends started one after the other, each queued behind the call in flight."""
    senders = []
    for index, chunk in enumerate(records):
        sender = Sender(batcher, call, chunk)
        sender.start()
        wait_until(lambda n=index + 1: batcher.queued(KEY) == n, f"{index + 1} queued sends")
        senders.append(sender)
    return senders


def finish(call: FakeCall, senders: list[Sender]) -> None:
    """Let the call in flight return (and every later call) and each send end."""
    call.hold = False
    call.release.release()
    for sender in senders:
        sender.join()


def test_a_send_alone_leaves_at_once_with_its_deadline() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    assert batcher.send(KEY, b"ab", 2, 2, 1003.0, call) == ["a", "b"]
    assert call.requests == [(b"ab", 2, 13.0)]
    assert batcher.calls == 1 and batcher.queued(KEY) == 0


def test_sends_queued_behind_a_call_leave_together_each_with_its_results() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"bc", b"d", b"ef")
    finish(call, [first, *others])
    assert [r for r, _, _ in call.requests] == [b"a", b"bcdef"]  # arrival order kept
    assert [c for _, c, _ in call.requests] == [1, 5]
    assert first.results == ["a"]
    assert [s.results for s in others] == [["b", "c"], ["d"], ["e", "f"]]
    assert batcher.calls == 2 and batcher.queued(KEY) == 0


class Interrupted(Exception):
    """What the test's signal handler raises in the main thread."""


def test_an_interrupted_send_wakes_the_sends_after_it_before_it_raises() -> None:
    """Each woken send wakes the next of its batch: one that a signal interrupts while it
    waits (an application's KeyboardInterrupt) waits on for its batch, wakes the send
    after it, and only then raises; no later send is left asleep."""
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    (before,) = queue_behind(batcher, call, b"b")
    after = Sender(batcher, call, b"d")
    handled = threading.Event()

    def handler(signum: int, frame: object) -> None:
        handled.set()
        raise Interrupted

    def conduct() -> None:  # the main thread waits in its send meanwhile
        wait_until(lambda: batcher.queued(KEY) == 2, "the main thread's send queued")
        after.start()
        wait_until(lambda: batcher.queued(KEY) == 3, "the send after it queued")
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
        handled.wait(WAIT_S)
        finish(call, [])

    conductor = threading.Thread(target=conduct, daemon=True)
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        conductor.start()
        with pytest.raises(Interrupted):
            batcher.send(KEY, b"c", 1, 1, 1000.0, call)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert handled.is_set()
    conductor.join(WAIT_S)
    for sender in (first, before, after):
        sender.join(WAIT_S)
        assert not sender.is_alive(), "a send of the batch was left asleep"
    assert [r for r, _, _ in call.requests] == [b"a", b"bcd"]  # the main send's too
    assert (first.results, before.results, after.results) == (["a"], ["b"], ["d"])


def test_a_send_whose_wake_never_comes_goes_on_once_its_batch_has_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chain a signal broke (the send before it raised between queueing and waiting, so
    it wakes nobody): the send after it finds its batch ended at its next look, returns
    its own results and wakes the send after it in turn."""
    real_wait = send_batcher._wait

    def wait(me: send_batcher._Send[bytes, str]) -> None:
        if me.part == b"c":
            raise Interrupted  # as a signal's handler raising before the wait began
        real_wait(me)

    monkeypatch.setattr(send_batcher, "_wait", wait)
    monkeypatch.setattr(send_batcher, "WAKE_CHECK_S", 0.01)
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    leader, broken, later, last = queue_behind(batcher, call, b"b", b"c", b"d", b"e")
    finish(call, [first, leader, broken])
    for sender in (later, last):
        sender.join(WAIT_S)
        assert not sender.is_alive(), "a send after the broken chain was left asleep"
    assert [r for r, _, _ in call.requests] == [b"a", b"bcde"]
    assert isinstance(broken.error, Interrupted) and broken.results is None
    assert (leader.results, later.results, last.results) == (["b"], ["d"], ["e"])


def test_other_keys_do_not_wait_for_a_call_in_flight() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    held = FakeCall()
    first = start_in_flight(batcher, held, b"a")
    other = FakeCall()
    assert batcher.send(("broker-b:10911", "Orders", -1), b"z", 1, 1, 1000.0, other) == ["z"]
    assert batcher.send((KEY[0], "Orders", 3), b"y", 1, 1, 1000.0, other) == [
        "y"
    ]  # a sharded queue
    held.release.release()
    first.join()
    assert first.results == ["a"]


def test_a_batch_is_capped_and_the_rest_leaves_in_the_next_call() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(3, 1 << 20, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"bc", b"d", b"ef")
    call.release.release()  # frees "a"; "bc"+"d" leave (3 messages), "ef" waits
    call.started.acquire()
    call.release.release()  # frees "bcd"; "ef" leaves
    call.started.acquire()
    call.release.release()
    for sender in [first, *others]:
        sender.join()
    assert [r for r, _, _ in call.requests] == [b"a", b"bcd", b"ef"]
    assert [s.results for s in others] == [["b", "c"], ["d"], ["e", "f"]]


def test_the_byte_cap_splits_batches_but_a_big_send_still_goes_alone() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 2, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"bcd", b"e", b"f")
    for _ in range(2):  # "a" returns, "bcd" leaves; "bcd" returns, "ef" leaves
        call.release.release()
        call.started.acquire()
    call.release.release()
    for sender in [first, *others]:
        sender.join()
    assert [r for r, _, _ in call.requests] == [b"a", b"bcd", b"ef"]
    assert [s.results for s in others] == [["b", "c", "d"], ["e"], ["f"]]


def test_a_failed_call_fails_every_send_of_its_batch_with_the_same_error() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"b", b"c")
    boom = ConnectionError("broker gone")
    call.error = boom
    finish(call, [first, *others])
    assert [s.error for s in [first, *others]] == [boom, boom, boom]
    assert batcher.queued(KEY) == 0
    call.error = None
    assert batcher.send(KEY, b"d", 1, 1, 1000.0, call) == ["d"]  # the key is free again


def test_a_call_answering_too_few_results_fails_its_sends() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    call.short = True
    with pytest.raises(BatchMismatch, match="1 results for 2 messages"):
        batcher.send(KEY, b"ab", 2, 2, 1000.0, call)


def test_each_send_gets_its_own_outcome_and_a_refused_part_fails_alone() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"bc", b"d", b"ef")
    refusal = PermissionError("topic of 'd' not writable")
    call.refused[b"d"] = refusal  # one section of the next request refused
    finish(call, [first, *others])
    assert [s.results for s in others] == [["b", "c"], None, ["e", "f"]]
    assert [s.error for s in others] == [None, refusal, None]


def test_a_send_alone_whose_part_is_refused_raises_that_and_frees_its_key() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    refusal = PermissionError("topic of 'x' not writable")
    call.refused[b"x"] = refusal
    with pytest.raises(PermissionError) as info:
        batcher.send(KEY, b"x", 1, 1, 1000.0, call)
    assert info.value is refusal
    assert batcher.send(KEY, b"y", 1, 1, 1000.0, call) == ["y"]  # alone again: the key is free
    assert batcher.calls == 2 and batcher.queued(KEY) == 0


def test_a_call_leaving_a_send_out_or_short_fails_only_what_it_cannot_place() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    call.outcomes_missing = True
    with pytest.raises(BatchMismatch, match="0 outcomes for 1 sends"):
        batcher.send(KEY, b"a", 1, 1, 1000.0, call)
    call.outcomes_missing = False
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"bc", b"de")
    call.short = True  # the last part gets one result too few
    finish(call, [first, *others])
    assert others[0].results == ["b", "c"]
    assert isinstance(others[1].error, BatchMismatch)
    assert "1 results for 2 messages" in str(others[1].error)


def test_a_batch_takes_the_earliest_deadline_and_a_passed_one_still_calls() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    assert batcher.send(KEY, b"a", 1, 1, 980.0, call) == ["a"]  # 10 s late: the call times out
    assert call.requests[0][2] == 0.001


def test_a_batch_takes_at_most_max_sends_sends() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock, max_sends=2)
    call = FakeCall()
    first = start_in_flight(batcher, call, b"a")
    others = queue_behind(batcher, call, b"b", b"c", b"d")
    call.release.release()  # frees "a"; "b" and "c" leave (2 sends), "d" waits
    call.started.acquire()
    finish(call, [first, *others])
    assert [r for r, _, _ in call.requests] == [b"a", b"bc", b"d"]


def test_a_key_of_two_lanes_has_a_second_call_in_flight_then_queues() -> None:
    batcher: SendBatcher[bytes, str] = SendBatcher(256, 1 << 20, clock)
    call = FakeCall()
    call.hold = True
    senders = [Sender(batcher, call, b"a", lanes=2), Sender(batcher, call, b"b", lanes=2)]
    for sender in senders:  # each leaves at once: two calls in flight
        sender.start()
        call.started.acquire()
    assert batcher.queued(KEY) == 0
    for index, chunk in enumerate((b"c", b"d")):  # both lanes busy: these queue
        senders.append(Sender(batcher, call, chunk, lanes=2))
        senders[-1].start()
        wait_until(lambda n=index + 1: batcher.queued(KEY) == n, f"{index + 1} queued")
    call.release.release()  # one call returns; "cd" leaves in its lane
    call.started.acquire()
    call.release.release()
    finish(call, senders)
    assert sorted(r for r, _, _ in call.requests[:2]) == [b"a", b"b"]
    assert call.requests[2][0] == b"cd" and len(call.requests) == 3
    assert [s.results for s in senders] == [["a"], ["b"], ["c"], ["d"]]
    assert batcher.queued(KEY) == 0
    call.hold = False
    assert batcher.send(KEY, b"e", 1, 1, 1000.0, call, 2) == ["e"]  # the key is free again


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        SendBatcher(0, 1)
    with pytest.raises(ValueError, match="must be positive"):
        SendBatcher(1, 1, max_sends=0)
