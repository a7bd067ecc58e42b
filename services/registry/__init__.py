"""BoltMQ registry service (built in a later issue)."""
