"""The ``boltmq`` command: services, admin subcommands and the local cluster (``dev/``)."""

from boltmq.cli.main import main

__all__ = ["main"]
