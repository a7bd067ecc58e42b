"""BoltMQ HA: master-to-replica CommitLog replication, its own process (DESIGN 7).

The gRPC server is :mod:`services.ha.server` (``boltmq serve ha``); it talks to
the store beside it only through the store's gRPC API.
"""

from services.ha.config import HAConfig

__all__ = ["HAConfig"]
