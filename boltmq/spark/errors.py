"""The connector's own errors: each names what to change, never a bare traceback."""

from __future__ import annotations


class BoltMQSparkError(Exception):
    """Base of the Spark connector's errors."""


class OptionError(BoltMQSparkError, ValueError):
    """A read or write option is missing, malformed or names something that does not exist."""


class DataLossError(BoltMQSparkError):
    """Offsets the query needs were removed by retention (``failOnDataLoss=true``)."""


class CorruptCommitLog(BoltMQSparkError):
    """A CommitLog segment holds bytes that are not a valid record (segment and offset named)."""


class WriteError(BoltMQSparkError):
    """A message of a write could not be sent; the Spark task fails with it."""
