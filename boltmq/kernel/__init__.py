"""What every BoltMQ server shares: configuration, the gRPC runtime, telemetry,
TLS, request signing, errors and their gRPC statuses, the store channel and the
registry client.

This package imports only :mod:`boltmq.wire` and the generated stubs.
"""
