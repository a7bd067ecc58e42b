"""The RocketMQ 5 gRPC protocol (``apache.rocketmq.v2.MessagingService``) on the broker.

The official RocketMQ 5 clients, unmodified, use a BoltMQ broker's gRPC address as
their endpoints (docs/rocketmq-clients.md). The service is registered on the broker's
own gRPC server beside BrokerService and maps each call onto the broker's parts:

- ``servicer``: the gRPC edge; authentication and every answer's Status;
- ``status``: BoltMQ's errors and send outcomes as the protocol's Code values;
- ``credentials``: the protocol's signature headers checked against BoltMQ's ACL;
- ``route``: QueryRoute's queues from the registries, QueryAssignment's;
- ``message_mapping``: protocol messages to BoltMQ records and back;
- ``sender``: SendMessage (normal, FIFO, delay, transaction halves), EndTransaction,
  RecallMessage;
- ``receiver``: ReceiveMessage, AckMessage, ChangeInvisibleDuration and
  ForwardMessageToDeadLetterQueue on the broker's POP consumption;
- ``telemetry_session``: the Telemetry stream: settings, transaction check-backs;
- ``client_registry``: the live clients from Heartbeat and Telemetry;
- ``protocol``: builds these parts from the broker's.
"""
