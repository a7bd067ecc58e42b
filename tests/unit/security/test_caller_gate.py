"""The per-caller limits interceptor of the store, HA service and registry (CallerGate).

The gate is handed handlers as gRPC's server would and their behaviours run
with a stand-in servicer context; time is an injected clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.kernel.caller_gate import CallerGate, caller_gate
from boltmq.kernel.caller_limits import CallerLimits
from boltmq.kernel.config import CallerLimitSettings, ConfigError
from boltmq.kernel.peer_identity import PEM_CERT_PROPERTY, IdentityReader
from services.ha.config import HAConfig
from services.registry.config import RegistryConfig
from services.store.config import StoreConfig

SERVICE = "boltmq.v1.StoreService"


class Aborted(Exception):
    pass


class Context:
    """What the gate touches of a servicer context: the peer, its certificate, abort."""

    def __init__(self, peer: str = "ipv4:127.0.0.1:40000", pem: bytes | None = None) -> None:
        self._peer = peer
        self._pem = pem
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return {PEM_CERT_PROPERTY: [self._pem]} if self._pem else {}

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class Details:
    def __init__(self, method: str) -> None:
        self.method = method


def gate(rate: float = 0, burst: int = 1, in_flight: int = 0, **kwargs: Any) -> CallerGate:
    limits = CallerLimits(rate, burst, in_flight, clock_s=Clock(), settings_prefix="caller")
    return CallerGate(SERVICE, "store", limits, **kwargs)


async def through(gate: CallerGate, handler: Any, method: str = f"/{SERVICE}/Get") -> Any:
    async def continuation(_details: Any) -> Any:
        return handler

    return await gate.intercept_service(continuation, Details(method))


def blocking_unary(release: asyncio.Event) -> Any:
    async def behaviour(request: Any, _context: Any) -> Any:
        await release.wait()
        return request

    return grpc.unary_unary_rpc_method_handler(behaviour)


def test_calls_in_flight_are_capped_per_caller_and_released_when_they_end() -> None:
    async def scenario() -> None:
        limited = await through(gate(in_flight=2), blocking_unary(release := asyncio.Event()))
        held = [asyncio.create_task(limited.unary_unary(i, Context())) for i in range(2)]
        await asyncio.sleep(0)
        refused = Context()
        with pytest.raises(Aborted):
            await limited.unary_unary(2, refused)
        assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.details == (
            "too many calls from 127.0.0.1 to the store: more than 2 calls in flight at once "
            "(caller_in_flight_max); retry later"
        )
        other = asyncio.create_task(limited.unary_unary("other", Context("ipv4:127.0.0.2:1")))
        await asyncio.sleep(0)
        release.set()
        assert await asyncio.gather(*held, other) == [0, 1, "other"]
        assert await limited.unary_unary(3, Context()) == 3  # the slots came back

    asyncio.run(scenario())


def test_an_open_stream_holds_its_slot_until_it_ends() -> None:
    async def scenario() -> None:
        async def watch(_request: Any, _context: Any) -> AsyncIterator[int]:
            for item in range(1_000):
                yield item

        limited = await through(gate(in_flight=1), grpc.unary_stream_rpc_method_handler(watch))
        stream = limited.unary_stream(None, Context())
        assert await anext(stream) == 0  # open: the caller's one slot is taken
        with pytest.raises(Aborted):
            await anext(limited.unary_stream(None, Context()))
        await stream.aclose()  # the client went away
        assert await anext(limited.unary_stream(None, Context())) == 0

    asyncio.run(scenario())


def test_a_coroutine_stream_handler_holds_its_slot_too() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def replicate(_requests: Any, _context: Any) -> None:
            await release.wait()

        handler = grpc.stream_stream_rpc_method_handler(replicate)
        limited = await through(gate(in_flight=1), handler, f"/{SERVICE}/AppendRawStream")
        held = asyncio.create_task(limited.stream_stream(iter(()), Context()))
        await asyncio.sleep(0)
        with pytest.raises(Aborted):
            await limited.stream_stream(iter(()), Context())
        release.set()
        await held
        await limited.stream_stream(iter(()), Context())

    asyncio.run(scenario())


def test_the_rate_refills_with_the_clock() -> None:
    async def scenario() -> None:
        limiter = gate(rate=2, burst=3)
        clock = limiter.limits._clock_s
        assert isinstance(clock, Clock)

        async def echo(request: Any, _context: Any) -> Any:
            return request

        limited = await through(limiter, grpc.unary_unary_rpc_method_handler(echo))
        assert [await limited.unary_unary(i, Context()) for i in range(3)] == [0, 1, 2]
        refused = Context()
        with pytest.raises(Aborted):
            await limited.unary_unary(3, refused)
        assert "more than 2 calls a second (caller_request_rate_per_s, burst 3)" in refused.details
        clock.now += 0.5  # one token back
        assert await limited.unary_unary(4, Context()) == 4

    asyncio.run(scenario())


def test_health_reflection_and_other_services_pass_untouched() -> None:
    async def scenario() -> None:
        handler = blocking_unary(asyncio.Event())
        limiter = gate(in_flight=1)
        for method in (
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            "/boltmq.v1.StoreServiceX/Get",
        ):
            assert await through(limiter, handler, method) is handler

    asyncio.run(scenario())


def test_callers_with_a_component_identity_are_keyed_by_it(tmp_path: Path) -> None:
    certificates = dev_certificates.generate(tmp_path, groups=("broker-a",))
    ha_pem = certificates.component_files("ha", "broker-a")[0].read_bytes()
    app_pem = certificates.client_cert_file.read_bytes()
    limiter = gate(in_flight=1, reader=IdentityReader(certificates.ca_file.read_bytes()))
    assert limiter.caller_key(Context(pem=ha_pem)) == "boltmq://broker-a/ha"  # type: ignore[arg-type]
    # An application's certificate names no component: its IP address.
    assert limiter.caller_key(Context("ipv4:10.0.0.9:1", app_pem)) == "10.0.0.9"  # type: ignore[arg-type]
    assert gate().caller_key(Context(pem=ha_pem)) == "127.0.0.1"  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [StoreConfig, HAConfig, RegistryConfig])
def test_every_internal_service_has_the_settings_and_zero_turns_them_off(
    config: type[CallerLimitSettings],
) -> None:
    assert issubclass(config, CallerLimitSettings)
    off = CallerLimitSettings(caller_request_rate_per_s=0, caller_in_flight_max=0)
    assert caller_gate(off, SERVICE, "store", None) is None
    assert caller_gate(CallerLimitSettings(), SERVICE, "store", None) is not None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"caller_request_rate_per_s": -1}, "caller_request_rate_per_s must be >= 0"),
        ({"caller_request_rate_per_s": float("nan")}, "caller_request_rate_per_s must be >= 0"),
        ({"caller_request_burst": -5}, "caller_request_burst must be >= 0"),
        ({"caller_in_flight_max": -1}, "caller_in_flight_max must be >= 0 (0: no limit)"),
        ({"caller_request_burst": 0}, "caller_request_burst must be >= 1 while"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CallerLimitSettings(**settings)


def test_a_zero_burst_is_fine_without_a_rate() -> None:
    CallerLimitSettings(caller_request_rate_per_s=0, caller_request_burst=0)
