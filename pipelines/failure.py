"""One line for a failed job, never a page of JVM stack trace (docs/style.md).

Spark wraps an error raised inside a Python data source (or a task) in a
Py4J/``PySparkException`` whose message holds the Python traceback of the
worker and the JVM stack. The line a user needs is the connector's own error
(``boltmq.spark.errors.OptionError: topic 'X' does not exist``), or Spark's
first line when the error is Spark's.
"""

from __future__ import annotations

import re
import sys
from typing import Final

_OWN_ERROR: Final = re.compile(
    r"^\s*(?:[\w.]+\.)?(OptionError|DataLossError|CorruptCommitLog|WriteError|"
    r"BoltMQSparkError|SendError|PullError|BoltMQError):\s*(.+)$",
    re.MULTILINE,
)


def failure_line(exc: BaseException) -> str:
    """The line of ``exc`` that says what went wrong."""
    text = str(exc)
    found = _OWN_ERROR.findall(text)
    if found:
        name, message = found[-1]  # the innermost: the worker's own raise
        return f"{name}: {message.strip()}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def report_failure(job: str, exc: BaseException) -> int:
    """Print ``job: error: <line>`` on stderr; the exit code 1."""
    print(f"{job}: error: {failure_line(exc)}", file=sys.stderr)
    return 1
