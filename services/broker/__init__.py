"""BoltMQ broker service (built in a later issue)."""
