"""Transaction check-back streams cannot be used to hold the broker's calls.

A TransactionChecks call lasts as long as its producer keeps it. An account opening
them by the dozen would fill the broker's concurrent calls with streams that never
end; each caller (access key) holds a bounded number, the next is refused with
RESOURCE_EXHAUSTED, and other accounts' producers still get theirs. The streams are
opened by hand against real processes with the ACL on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from services.broker.transaction.check_channel import CHECK_STREAMS_PER_CALLER_MAX
from tests.integration.test_acl import ORDERS, AclCluster
from tests.integration.test_acl_transactions import MALLORY, SEED, TX_SETTINGS, RawChecks
from tests.waiting import wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path, SEED, TX_SETTINGS)
    yield started
    started.stop()


def test_one_account_cannot_hold_more_than_its_share_of_check_streams(
    cluster: AclCluster,
) -> None:
    held = [
        RawChecks(cluster, MALLORY, "mallory-group") for _ in range(CHECK_STREAMS_PER_CALLER_MAX)
    ]
    try:
        assert all(stream.opened() for stream in held), "the streams within the cap open"
        extra = RawChecks(cluster, MALLORY, "mallory-group")
        assert not extra.opened()
        wait_until(lambda: extra.code is not None, what="the stream past the cap is refused")
        assert extra.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "at most" in extra.details and "TransactionChecks" in extra.details
        assert all(stream.code is None for stream in held), "the streams within the cap stay open"

        # Another account's producer is not crowded out.
        own = RawChecks(cluster, ORDERS, "txg")
        try:
            assert own.opened() and own.code is None
        finally:
            own.close()

        # A stream given back makes room for one more, once the broker has seen it end.
        held.pop().close()

        def reopened() -> bool:
            again = RawChecks(cluster, MALLORY, "mallory-group")
            if again.opened():
                held.append(again)
                return True
            again.close()
            return False

        wait_until(reopened, what="a new stream in the place of the closed one")
    finally:
        for stream in held:
            stream.close()
