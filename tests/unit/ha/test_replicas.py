"""The master's record of its connected replicas: sessions and lag."""

from __future__ import annotations

from services.ha.replicas import ConnectedReplicas, ReplicaLag


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lag_counts_bytes_and_the_time_since_the_replica_last_had_everything() -> None:
    clock = Clock()
    replicas = ConnectedReplicas(monotonic=clock, wall_ms=lambda: 7)
    replicas.note_master_max(1000)
    session = replicas.open("r1:1", 1000)
    assert replicas.lags() == [ReplicaLag("r1:1", 1000, 0, 0.0, 7)]
    replicas.note_master_max(1500)
    clock.now += 2.5
    assert replicas.lags() == [ReplicaLag("r1:1", 1000, 500, 2.5, 7)]
    assert replicas.report("r1:1", session, 1500)
    clock.now += 1
    assert replicas.lags()[0].lag_seconds == 0.0
    replicas.note_master_max(1200)  # never goes back
    assert replicas.master_max_offset == 1500


def test_only_the_newest_session_of_a_replica_counts() -> None:
    replicas = ConnectedReplicas()
    old = replicas.open("r1:1", 0)
    new = replicas.open("r1:1", 10)
    assert not replicas.report("r1:1", old, 5)
    assert not replicas.close("r1:1", old)  # the old stream ending does not forget it
    assert replicas.acked_offsets() == {"r1:1": 10}
    assert replicas.close("r1:1", new)
    assert replicas.acked_offsets() == {}
