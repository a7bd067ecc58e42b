"""Client channels: a wait for the next connection attempt after a peer comes back.

A real gRPC server on loopback; the channel is the one every caller gets
(:func:`boltmq.kernel.channels.sync_channel`).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from boltmq.kernel import channels


def _server(port: int = 0) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, bound


@pytest.fixture
def gone_port() -> Iterator[int]:
    """A loopback port whose server has stopped (connections are refused)."""
    server, port = _server()
    server.stop(None).wait()
    yield port


def test_a_refused_peer_is_not_waited_for_beyond_the_timeout(gone_port: int) -> None:
    chan = channels.sync_channel(f"127.0.0.1:{gone_port}")
    try:
        assert channels.await_connected(chan, 0.5) is False
    finally:
        chan.close()


def test_a_peer_back_on_its_port_is_reached_by_the_channels_next_attempt(gone_port: int) -> None:
    address = f"127.0.0.1:{gone_port}"
    chan = channels.sync_channel(address)
    server = None
    try:
        assert channels.await_connected(chan, 0.5) is False  # refused: now it backs off
        server, _ = _server(gone_port)
        assert channels.await_connected(chan) is True  # within one backoff
        with pytest.raises(grpc.RpcError) as answered:  # the server answers at once
            chan.unary_unary("/test.Nothing/Here")(b"", timeout=10)
        assert answered.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        chan.close()
        if server is not None:
            server.stop(None)
