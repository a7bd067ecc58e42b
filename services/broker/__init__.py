"""The broker: topics, groups, offsets, sends, pulls, retries, delays and transactions,
in front of one store (``boltmq serve broker``).

The map, top (the edge and the assembly) to bottom (what everything uses):

- ``server.py``: the process: ``create_server`` / ``serve`` over the kernel's runtime.
- ``broker.py``: the assembly: builds every part through its constructor, runs their lifecycle.
- ``servicer.py``: the BrokerService gRPC edge: each RPC to its processor, errors to statuses.
- ``admin/``: the operators' calls on topics, groups, messages and the broker's role.
- ``clients/``: heartbeats and group members, orderly consumers' queue locks, offset commits.
- ``send/``: SendMessage and SendStream: the batch checks, the send processor, the stream.
- ``pop/``: POP consumption (receive, ack, change invisibility, dead-letter): the in-broker
  service and its receipt handles.
- ``pull/``: PullMessage and PullQueues: the read checks and the pull processor.
- ``retry/``: retry and dead-letter topics, ConsumerSendBack, dead letters listed and resent.
- ``transaction/``: half messages, their decision, check-back and its producer streams.
- ``metrics.py``: the broker's OpenTelemetry instruments (traffic, consumer lag, parked pulls).
- ``stats/``: rolling last-minute and last-hour traffic per topic and group (``admin stats``).
- ``delay/``: delay levels, delay messages in the schedule topic, the scheduler delivering them.
- ``cluster/``: registration with the registries, publishing a topic change, and a replica's
  copy of its master broker's metadata.
- ``arrivals/``: the long-poll hub where pulls wait, and the store's arrival stream waking them.
- ``access/``: the ACL (kept in the store), signed-call checks, client limits, the interceptor.
- ``metadata/``: the topic, group, consumer-offset, delay-offset and POP-state tables, their JSON
  documents, the names they accept, and saving them in the store.
- ``store/``: the broker's client of its store, the append stream, the store's role.
- ``config.py``: ``BrokerConfig``, every setting with its unit and check.
- ``wire.py``: the broker's values as proto messages; a store's append as a SendResponse.
- ``errors.py``: the broker's named errors, in the kernel's one error vocabulary.

A package or module imports only those below it in the list; ``config.py``
(which reads ``delay/``'s level table), ``wire.py`` (``metadata/``'s topic
configuration) and ``errors.py`` (nothing) serve the whole list.
``lint-imports`` keeps the packages free of cycles.
"""
