"""The BoltMQ name registry: brokers register, clients look up routes (DESIGN 6).

The embedding API::

    from services.registry import RegistryConfig, RouteTable, Registration, BrokerIdentity

The gRPC server is :mod:`services.registry.server` (``boltmq serve registry``).
"""

from services.registry.config import RegistryConfig
from services.registry.route_table import (
    BrokerIdentity,
    BrokerLive,
    BrokerRoute,
    InvalidRequest,
    QueueRoute,
    Registration,
    Route,
    RouteTable,
    TopicSettings,
)

__all__ = [
    "BrokerIdentity",
    "BrokerLive",
    "BrokerRoute",
    "InvalidRequest",
    "QueueRoute",
    "RegistryConfig",
    "Registration",
    "Route",
    "RouteTable",
    "TopicSettings",
]
