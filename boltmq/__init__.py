"""BoltMQ: a RocketMQ-style message queue. SDK and shared kernel."""

__version__ = "0.1.0"
