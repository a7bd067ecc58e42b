"""Example Spark jobs on the BoltMQ connector (pipelines/README.md).

- :mod:`pipelines.window_aggregates`: streaming; events of a topic aggregated per
  key and tag over event-time windows, written to another topic.
- :mod:`pipelines.store_export`: batch; a store directory to a Parquet dataset
  partitioned by topic, plus per-topic statistics.
- :mod:`pipelines.events`: the event format and a sample-event producer.
- :mod:`pipelines.window_report`: prints the aggregates a topic holds.

Each runs as ``python -m pipelines.<module> --help``; ``make pipeline-demo`` runs
them end to end against ``boltmq dev``.
"""
