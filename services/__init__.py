"""BoltMQ services: store, broker, registry and HA, each a gRPC server."""
