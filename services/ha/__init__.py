"""BoltMQ HA: master-to-replica CommitLog replication, its own process (see docs/ha.md).

It talks to the store beside it only through the store's gRPC API. Its modules:

- :mod:`~services.ha.server`: the process (``boltmq serve ha``): start-up, health, shutdown.
- :mod:`~services.ha.servicer`: the gRPC edge (Replicate, Status); errors become statuses.
- :mod:`~services.ha.node`: one HA service's parts and the role watcher switching between them.
- :mod:`~services.ha.master`: the master side: accepts Replicate streams, hands each a session.
- :mod:`~services.ha.replica_session`: one replica's stream on the master, its ack window.
- :mod:`~services.ha.replicas`: the master's record of connected replicas and their lag.
- :mod:`~services.ha.resume`: where a master resumes a replica (pure rules).
- :mod:`~services.ha.progress`: replica acks forwarded to the master's store (ReportReplicas).
- :mod:`~services.ha.follower`: the replica side: follows the master into the own store.
- :mod:`~services.ha.controller`: the master elected through etcd, and self-fencing (optional).
- :mod:`~services.ha.group_keys`: the group's keys in etcd and every etcd call (their layout).
- :mod:`~services.ha.master_locator`: where the master's HA service is (config or registries).
- :mod:`~services.ha.store_client`: calls to the own store, with deadlines and named errors.
- :mod:`~services.ha.metrics`: replication lag as OpenTelemetry gauges.
- :mod:`~services.ha.errors`: the HA service's named errors and the status each carries.
- :mod:`~services.ha.config`: :class:`HAConfig`, every setting of one HA process.
"""

from services.ha.config import HAConfig

__all__ = ["HAConfig"]
