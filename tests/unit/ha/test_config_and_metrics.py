"""HAConfig validation and the lag metrics as an OpenTelemetry reader sees them."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from boltmq.kernel.config import ConfigError, load_config
from boltmq.v1 import registry_pb2
from services.ha.config import HAConfig
from services.ha.master_locator import pick_master
from services.ha.metrics import LagMetrics
from services.ha.replicas import ReplicaLag


def test_config_loads_from_flags_and_env_and_refuses_nonsense() -> None:
    config = load_config(
        HAConfig,
        env={"BOLTMQ_MASTER_ADDRESS": "10.0.0.1:10912"},
        overrides={
            "store_address": "127.0.0.1:1",
            "replica_start": "FIRST_SEGMENT",
            "registry_addresses": "a:1, b:2",
        },
    )
    assert config.master_address == "10.0.0.1:10912"
    assert config.registry_address_list == ("a:1", "b:2")
    assert config.listen_port == 10912
    for bad, match in (
        ({"replica_start": "MIDDLE"}, "replica_start"),
        ({"store_address": "nohost"}, "store_address"),
        ({"master_address": "x:y"}, "master_address"),
        ({"heartbeat_interval_ms": "0"}, "heartbeat_interval_ms"),
        ({"housekeeping_interval_ms": "100"}, "housekeeping_interval_ms"),
        ({"reconnect_min_ms": "900", "reconnect_max_ms": "800"}, "reconnect"),
        ({"max_chunk_bytes": str(64 << 20)}, "max_chunk_bytes"),
        ({"broker_name": "a/b"}, "broker_name"),
        ({"no_such_setting": "1"}, "unknown"),
    ):
        with pytest.raises(ConfigError, match=match):
            load_config(HAConfig, env={}, overrides=bad)


def test_controller_settings_are_checked_together() -> None:
    base = {"registry_addresses": "r:1", "controller_endpoints": "e1:2379, e2:2379"}
    config = load_config(HAConfig, env={}, overrides=base)
    assert config.controller_endpoint_list == ("e1:2379", "e2:2379")
    assert config.controller_lease_ms == 3000 and config.controller_prefix == "/boltmq"
    assert load_config(HAConfig, env={}, overrides={}).controller_endpoint_list == ()  # off
    for bad, match in (
        ({"controller_endpoints": "e1"}, "controller_endpoints: expected host:port"),
        ({"registry_addresses": ""}, "controller_endpoints needs registry_addresses"),
        ({"master_address": "m:1"}, "exclude each other"),
        ({"controller_lease_ms": "2500"}, "whole seconds between 2000 and 600000"),
        ({"controller_lease_ms": "1000"}, "whole seconds between 2000 and 600000"),
        ({"controller_prefix": "/boltmq/"}, "controller_prefix must start with '/'"),
        ({"controller_prefix": "/a b"}, "controller_prefix must start with '/'"),
    ):
        with pytest.raises(ConfigError, match=match):
            load_config(HAConfig, env={}, overrides={**base, **bad})


def test_etcd_credentials_need_both_settings_and_a_password_in_the_file(
    tmp_path: Path,
) -> None:
    base = {"registry_addresses": "r:1", "controller_endpoints": "e1:2379"}
    secret = tmp_path / "password"
    secret.write_text("s3cret\nignored\n")
    config = load_config(
        HAConfig,
        env={},
        overrides={**base, "controller_username": "ha", "controller_password_file": str(secret)},
    )
    assert config.controller_credentials() == ("ha", "s3cret")
    assert load_config(HAConfig, env={}, overrides=base).controller_credentials() is None
    (tmp_path / "empty").write_text("\n")
    for bad, match in (
        ({"controller_username": "ha"}, "go together"),
        ({"controller_password_file": str(secret)}, "go together"),
        (
            {"controller_username": "ha", "controller_password_file": str(tmp_path / "nope")},
            "cannot be read: No such file",
        ),
        (
            {"controller_username": "ha", "controller_password_file": str(tmp_path / "empty")},
            "holds no password",
        ),
    ):
        with pytest.raises(ConfigError, match=match):
            load_config(HAConfig, env={}, overrides={**base, **bad})


def test_the_master_is_the_live_broker_id_0_of_the_group() -> None:
    def live(name: str, broker_id: int, ha: str, epoch: int = 0) -> registry_pb2.BrokerLiveInfo:
        return registry_pb2.BrokerLiveInfo(
            cluster_name="C", broker_name=name, broker_id=broker_id, ha_address=ha, epoch=epoch
        )

    info = registry_pb2.ClusterInfo(
        brokers=[
            live("b", 0, "other:1"),
            live("a", 1, "replica:1"),
            live("a", 0, "old:1", 1),
            live("a", 0, "new:1", 2),
        ]
    )
    found = pick_master(info, "C", "a")
    assert found is not None and found.ha_address == "new:1"
    assert pick_master(info, "C", "c") is None
    assert pick_master(info, "D", "a") is None


def test_lag_gauges_report_each_replica_and_the_follower() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    lags = [ReplicaLag("r1:1", 900, 100, 1.5, 0), ReplicaLag("r2:2", 1000, 0, 0.0, 0)]
    follower_lag: list[int | None] = [None]
    LagMetrics(lambda: lags, lambda: follower_lag[0], provider)
    follower_lag[0] = 42

    points: dict[str, dict[str, float]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = str(dict(point.attributes or {}).get("replica", "self"))
                    points.setdefault(metric.name, {})[key] = point.value
    assert points == {
        "boltmq.ha.replica.lag_bytes": {"r1:1": 100, "r2:2": 0},
        "boltmq.ha.replica.lag_seconds": {"r1:1": 1.5, "r2:2": 0.0},
        "boltmq.ha.follower.lag_bytes": {"self": 42},
    }
    provider.shutdown()
