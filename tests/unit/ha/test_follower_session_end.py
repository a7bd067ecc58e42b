"""A follower's session ends when its store fails, even while the master keeps streaming.

The session's sender reads chunks from the master and passes them to the store
over one append stream, at most ``APPENDS_IN_FLIGHT`` unanswered; another task
reads the store's answers. When the store fails, the session cancels the sender
and ends with the store's error. A sender whose read of the next chunk completed
in the same moment as that cancel once ran on (``asyncio.wait_for`` on Python 3.11
drops the cancel then), filled the append window nobody answered any more and
waited on it for good: replication never resumed. Here a stand-in master always
has the next chunk ready, so the cancel meets a read that is completing.
"""

from __future__ import annotations

import asyncio

from boltmq.v1 import store_pb2
from services.ha.config import HAConfig
from services.ha.errors import StoreUnavailable
from services.ha.follower import APPENDS_IN_FLIGHT, Follower

CHUNK_BYTES = 10
ROUNDS = 30
SESSION_END_S = 5.0
"""Far beyond what a session needs to end here (a few loop iterations)."""


class StreamingMaster:
    """A master's Replicate call that always has the next chunk ready."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    async def read(self) -> store_pb2.CommitLogChunk:
        await asyncio.sleep(0)  # a chunk arrives at every turn of the loop
        chunk = store_pb2.CommitLogChunk(
            offset=self.offset,
            end_offset=self.offset + CHUNK_BYTES,
            master_max_offset=self.offset + 100 * CHUNK_BYTES,
        )
        self.offset += CHUNK_BYTES
        return chunk

    async def write(self, report: object) -> None:
        """The replica's reports (the follower's end) are taken and dropped."""


class FailingAppends:
    """The store's append stream: it answers ``answered`` chunks, then the store is gone."""

    def __init__(self, answered: int) -> None:
        self.sent: list[store_pb2.CommitLogChunk] = []
        self.answered = answered
        self.given = 0
        self.cancelled = False

    async def send(self, chunk: store_pb2.CommitLogChunk) -> None:
        self.sent.append(chunk)

    async def answer(self) -> store_pb2.AppendRawResponse:
        await asyncio.sleep(0)
        if self.given == self.answered:
            raise StoreUnavailable("store at 127.0.0.1:1 ended the append stream")
        chunk = self.sent[self.given]
        self.given += 1
        return store_pb2.AppendRawResponse(ok=True, max_offset=chunk.end_offset)

    def cancel(self) -> None:
        self.cancelled = True


class StoreOf:
    """What the follower asks of its store client in a session: one append stream."""

    def __init__(self, appends: FailingAppends) -> None:
        self.appends = appends

    def raw_appends(self) -> FailingAppends:
        return self.appends


def session(answered: int) -> tuple[Follower, StreamingMaster, FailingAppends]:
    config = HAConfig(store_address="127.0.0.1:1", master_address="127.0.0.1:2")
    appends = FailingAppends(answered)
    follower = Follower(config, StoreOf(appends), locator=None, own_address="r:1")  # type: ignore[arg-type]
    return follower, StreamingMaster(0), appends


async def ends_with_the_store_error(answered: int) -> FailingAppends:
    follower, master, appends = session(answered)
    try:
        async with asyncio.timeout(SESSION_END_S):
            await follower._follow(master, "127.0.0.1:2", 0)  # type: ignore[arg-type]
    except StoreUnavailable:
        return appends
    except TimeoutError:
        raise AssertionError(
            f"the session did not end within {SESSION_END_S} s of its store failing "
            f"({len(appends.sent)} chunks sent, {answered} answered)"
        ) from None
    raise AssertionError("the session ended without the store's error")


def test_a_session_ends_when_its_store_fails_while_the_master_streams() -> None:
    async def rounds() -> None:
        for round_ in range(ROUNDS):
            answered = round_ % (2 * APPENDS_IN_FLIGHT)  # the failure at every window position
            appends = await ends_with_the_store_error(answered)
            assert appends.cancelled
            assert answered < len(appends.sent) <= answered + APPENDS_IN_FLIGHT

    asyncio.run(rounds())
