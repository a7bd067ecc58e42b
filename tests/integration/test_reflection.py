"""gRPC reflection: served by default, refused when ``reflection`` is off (production).

The attack: an application that reaches a service port asks reflection for the
service's methods. With ``reflection=false`` (the production overlay's
``BOLTMQ_REFLECTION``) the call is UNIMPLEMENTED and the service still answers
its own calls.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import registry_pb2, registry_pb2_grpc
from tests.integration.procs import ServiceProcess


def listed_services(address: str) -> list[str]:
    """The service names reflection lists at ``address``."""
    with sync_channel(address) as channel:
        answers = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        return [s.name for a in answers for s in a.list_services_response.service]


def test_reflection_lists_the_services_by_default_and_nothing_when_turned_off(
    tmp_path: Path,
) -> None:
    default = ServiceProcess("registry", tmp_path / "logs").start()
    closed = ServiceProcess("registry", tmp_path / "logs", "reflection=false").start()
    try:
        assert "boltmq.v1.RegistryService" in listed_services(default.address)
        with pytest.raises(grpc.RpcError) as refused:
            listed_services(closed.address)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with sync_channel(closed.address) as channel:  # the service itself still answers
            registry_pb2_grpc.RegistryServiceStub(channel).GetClusterInfo(
                registry_pb2.GetClusterInfoRequest(), timeout=5
            )
    finally:
        default.stop()
        closed.stop()
