"""The BoltMQ name registry: brokers register, clients look up routes.

Its modules:

- :mod:`~services.registry.server`: the process (``boltmq serve registry``) and its expiry task.
- :mod:`~services.registry.servicer`: the gRPC edge: requests to route-table values and back.
- :mod:`~services.registry.route_table`: live brokers and the routes they serve (pure, in memory).
- :mod:`~services.registry.errors`: the registry's named errors and the status each carries.
- :mod:`~services.registry.config`: :class:`RegistryConfig`, every setting of one registry.

The embedding API::

    from services.registry import RegistryConfig, RouteTable, Registration, BrokerMember
"""

from services.registry.config import RegistryConfig
from services.registry.errors import InvalidRequest, TopicNotServed
from services.registry.route_table import (
    BrokerLive,
    BrokerMember,
    BrokerRoute,
    QueueRoute,
    Registration,
    Route,
    RouteTable,
    TopicSettings,
)

__all__ = [
    "BrokerLive",
    "BrokerMember",
    "BrokerRoute",
    "InvalidRequest",
    "QueueRoute",
    "RegistryConfig",
    "Registration",
    "Route",
    "RouteTable",
    "TopicNotServed",
    "TopicSettings",
]
