"""The MQTT gateway: devices speak MQTT 5.0 or 3.1.1, the gateway speaks gRPC to the cluster.

A separately deployed service (``boltmq serve mqtt``), a client of the cluster through
the BoltMQ SDK like any application; docs/mqtt.md has the design, the mapping of MQTT
onto BoltMQ, the limits and the sizing. Its modules:

- :mod:`~services.mqtt.server`: the process, its listeners (TCP, TLS, WebSocket) and probes.
- :mod:`~services.mqtt.connection`: one device's packets (decoded by the ``mqtt5`` library).
- :mod:`~services.mqtt.mqtt311`: MQTT 3.1.1 packets rewritten for the ``mqtt5`` library.
- :mod:`~services.mqtt.outbox`: what a connection sends, bounded.
- :mod:`~services.mqtt.hub`: the pod's connections and ordinary subscriptions.
- :mod:`~services.mqtt.readers`: threads reading BoltMQ queues for the devices.
- :mod:`~services.mqtt.shares`: shared subscriptions as consumer groups.
- :mod:`~services.mqtt.sessions`: persistent sessions kept in the cluster.
- :mod:`~services.mqtt.retained`: retained messages kept in the cluster.
- :mod:`~services.mqtt.delivery`: a message between MQTT and BoltMQ, both ways.
- :mod:`~services.mqtt.topics`: topic names, filters and their mapping.
- :mod:`~services.mqtt.bridge`: the SDK clients, and the checks made as the device.
- :mod:`~services.mqtt.transports`: TCP/TLS and WebSocket byte streams.
- :mod:`~services.mqtt.config`: :class:`MqttConfig`, every setting of one gateway.
"""

from services.mqtt.config import MqttConfig

__all__ = ["MqttConfig"]
