"""Client channels to BoltMQ services: the size limits, keep-alives and reconnect
backoff every caller uses (SDK threads, the CLI, one service calling another).

No server machinery here: an application that only sends and consumes imports
this module and not the health, reflection or server code of
:mod:`boltmq.kernel.runtime`.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from boltmq.kernel import in_process, telemetry
from boltmq.kernel.tls import ClientTLS

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest gRPC message a server or client accepts (a 256 x 256 KiB batch fits)."""

RECONNECT_BACKOFF_MAX_MS = 1_000
"""Longest wait between a channel's connection attempts (gRPC adds up to 20% jitter)."""
HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"
"""Every BoltMQ service answers it (an empty request asks about the whole server)."""
RECONNECT_WAIT_S = RECONNECT_BACKOFF_MAX_MS * 1.2 / 1000 + 0.3
"""Time for a channel in backoff to make its next attempt: the backoff, its jitter, a connect."""

CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # Reconnect fast after a peer restarts: gRPC's default backoff grows to 120 s,
    # and a broker would fail every store call for that long after the store is back.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
)


def channel(
    address: str,
    tls: ClientTLS | None = None,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    """An aio channel to ``host:port`` with BoltMQ's size limits (TLS when ``tls`` is given).

    ``interceptors`` run after the telemetry ones (e.g. an ACL request signer). An address
    this process serves itself (a broker served with its store) gets an in-process
    channel: no hop, no TLS, no interceptors (:mod:`boltmq.kernel.in_process`).
    """
    local = in_process.channel_to(address)
    if local is not None:
        return local  # the part of a Channel the callers use
    chosen = [*telemetry.aio_client_interceptors(), *interceptors]
    if tls is not None:
        return grpc.aio.secure_channel(
            address, tls.credentials(), options=CHANNEL_OPTIONS, interceptors=chosen
        )
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=chosen)


def sync_channel(address: str, tls: ClientTLS | None = None) -> grpc.Channel:
    """A blocking channel (SDK threads, CLI) with BoltMQ's size limits (TLS when given)."""
    if tls is not None:
        return telemetry.traced_channel(
            grpc.secure_channel(address, tls.credentials(), options=CHANNEL_OPTIONS)
        )
    return telemetry.traced_channel(grpc.insecure_channel(address, options=CHANNEL_OPTIONS))


def await_connected(chan: grpc.Channel, timeout_s: float = RECONNECT_WAIT_S) -> bool:
    """Whether ``chan`` connects within ``timeout_s`` (default: one reconnect backoff).

    A channel that failed to connect fails every call at once while it backs off,
    even when its peer is back sooner: a caller that waits here for the channel's
    next attempt is answered by the peer as it is now, not by the failure cached
    from before the peer restarted. The wait is a health check that waits for the
    connection (``wait_for_ready``); any answer, a refusal included, means connected.
    (Not ``grpc.channel_ready_future``: its polling thread outlives the wait and
    raises into the application when the channel closes meanwhile.)
    """
    check = chan.unary_unary(HEALTH_CHECK_METHOD)  # bytes in and out: no health stubs
    try:
        check(b"", timeout=max(timeout_s, 0.0), wait_for_ready=True)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        return code not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
    except ValueError:  # the channel was closed
        return False
    return True
