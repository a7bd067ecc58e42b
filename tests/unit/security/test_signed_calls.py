"""The broker's authentication of signed calls: body, method, window, nonce (one replay cache),
target broker group.

The clock is a fixed number: no test depends on the wall clock.
"""

from __future__ import annotations

import json

import grpc
import pytest

from boltmq.kernel.signing import Credentials, signed_metadata
from services.broker.access.acl_file import AclDocument
from services.broker.access.authorizer import AccessDenied, Authorizer
from services.broker.access.replay_cache import ReplayCache

NOW_MS = 1_700_000_000_000
WINDOW_MS = 30_000
SEND = "/boltmq.v1.BrokerService/SendMessage"
BODY = b"\x0a\x02pg"
ORDERS = Credentials("orders-app", "orders-secret")
DOCUMENT = AclDocument.parse(
    json.dumps({"accounts": [{"accessKey": ORDERS.access_key, "secretKey": ORDERS.secret_key}]})
)


class Clock:
    def __init__(self) -> None:
        self.now_ms = NOW_MS

    def __call__(self) -> int:
        return self.now_ms


def authorizer(clock: Clock, max_entries: int = 1000, broker: str = "broker-a") -> Authorizer:
    return Authorizer(
        lambda: DOCUMENT,
        WINDOW_MS,
        ReplayCache(WINDOW_MS, max_entries),
        clock_ms=clock,
        broker_name=broker,
    )


def signed(
    credentials: Credentials = ORDERS,
    method: str = SEND,
    body: bytes = BODY,
    timestamp_ms: int = NOW_MS,
    target: str = "broker-a",
) -> list[tuple[str, str]]:
    return list(signed_metadata(credentials, method, "c-1", body, timestamp_ms, target=target))


def refusal(auth: Authorizer, metadata: list[tuple[str, str]], body: bytes = BODY) -> str:
    with pytest.raises(AccessDenied) as info:
        auth.authenticate(SEND, metadata, body)
    assert ORDERS.secret_key not in str(info.value) + info.value.log_reason
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    return info.value.log_reason  # what the broker logs; the caller may be told less


def test_a_good_call_passes_once_and_its_replay_is_refused() -> None:
    auth = authorizer(Clock())
    metadata = signed()
    assert auth.authenticate(SEND, metadata, BODY).access_key == "orders-app"
    assert "replayed call: nonce" in refusal(auth, metadata)
    assert auth.authenticate(SEND, signed(), BODY).access_key == "orders-app"  # a new nonce


def test_another_body_another_method_a_wrong_secret_or_time_are_refused() -> None:
    auth = authorizer(Clock())
    assert "request body differs" in refusal(auth, signed(), BODY + b"x")
    other_method = signed(method="/boltmq.v1.BrokerService/ListTopics")
    assert "signed for another method" in refusal(auth, other_method)
    wrong = Credentials(ORDERS.access_key, "not-the-secret")
    assert "wrong signature for access key orders-app" in refusal(auth, signed(wrong))
    for skew in (-WINDOW_MS - 1, WINDOW_MS + 1):
        assert "from the broker's clock" in refusal(auth, signed(timestamp_ms=NOW_MS + skew))
    unknown = Credentials("nobody-here", "orders-secret")
    assert "unknown access key" in refusal(auth, signed(unknown))
    assert "no credentials" in refusal(auth, [])


def test_a_refused_call_does_not_use_up_its_nonce() -> None:
    auth = authorizer(Clock())
    metadata = signed()
    refusal(auth, metadata, b"tampered")  # the attacker's attempt must not block the owner
    assert auth.authenticate(SEND, metadata, BODY).access_key == "orders-app"


def test_a_nonce_is_remembered_for_as_long_as_its_timestamp_is_accepted() -> None:
    clock = Clock()
    auth = authorizer(clock)
    metadata = signed(timestamp_ms=NOW_MS + WINDOW_MS)  # a client clock ahead by the window
    auth.authenticate(SEND, metadata, BODY)
    for clock.now_ms in (NOW_MS + WINDOW_MS, NOW_MS + 2 * WINDOW_MS):
        assert "replayed call" in refusal(auth, metadata)
    clock.now_ms = NOW_MS + 2 * WINDOW_MS + 1
    assert "from the broker's clock" in refusal(auth, metadata)


def test_the_old_format_is_refused_with_an_upgrade_message() -> None:
    old = [
        (key, value)
        for key, value in signed()
        if key not in ("x-boltmq-nonce", "x-boltmq-content-sha256")
    ]
    assert "upgrade the client" in refusal(authorizer(Clock()), old)


def test_format_2_without_a_target_is_refused_with_an_upgrade_message() -> None:
    old = [(key, value) for key, value in signed() if key != "x-boltmq-target"]
    assert "signs the target broker" in refusal(authorizer(Clock()), old)


def test_a_call_signed_for_another_broker_group_is_refused_without_using_its_nonce() -> None:
    broker_a, broker_b = authorizer(Clock()), authorizer(Clock(), broker="broker-b")
    metadata = signed(target="broker-a")
    assert "signed for broker 'broker-a', not for this broker ('broker-b')" in refusal(
        broker_b, metadata
    )
    assert broker_a.authenticate(SEND, metadata, BODY).access_key == "orders-app"
    assert "replayed call" in refusal(broker_a, metadata)


def test_a_call_signed_for_any_broker_is_accepted_by_every_group() -> None:
    for broker in ("broker-a", "broker-b"):
        auth = authorizer(Clock(), broker=broker)
        assert auth.authenticate(SEND, signed(target=""), BODY).access_key == "orders-app"


def test_the_replay_cache_is_bounded_and_expires_in_order() -> None:
    cache = ReplayCache(window_ms=100, max_entries=3)
    assert [cache.admit(n, 1_000, 1_000) for n in "abc"] == ["", "", ""]
    assert cache.admit("d", 1_000, 1_050) == "full"  # a, b, c could still be replayed
    assert cache.admit("a", 1_000, 1_050) == "replayed"
    assert cache.admit("d", 1_000, 1_101) == ""  # a, b, c expired at 1_100
    assert len(cache) == 1 and cache.admit("a", 1_101, 1_101) == ""


def test_a_full_cache_refuses_with_a_retriable_code() -> None:
    auth = authorizer(Clock(), max_entries=1)
    auth.authenticate(SEND, signed(), BODY)
    with pytest.raises(AccessDenied, match="retry shortly") as info:
        auth.authenticate(SEND, signed(), BODY)
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_the_caller_cannot_tell_an_unknown_access_key_from_a_wrong_secret() -> None:
    auth = authorizer(Clock())
    answers = set()
    for who in (
        Credentials("orders-app", "not-the-secret"),
        Credentials("nobody-here", "x-secret"),
    ):
        with pytest.raises(AccessDenied) as info:
            auth.authenticate(SEND, signed(who), BODY)
        answers.add(str(info.value).replace(who.access_key, "KEY"))
    assert answers == {
        "access key KEY is unknown, or the signature does not match its secret "
        "and the method called"
    }
    stale_unknown = signed(Credentials("nobody-here", "x-secret"), timestamp_ms=NOW_MS - 61_000)
    assert "from the broker's clock" in refusal(auth, stale_unknown)  # before the look-up
