"""BoltMQ ha service (built in a later issue)."""
