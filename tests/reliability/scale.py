"""How hard the reliability and fuzz suites push: short in ``make test``, long in
``make test-reliability``.

Three environment variables, read here and nowhere else:

- ``BOLTMQ_RELIABILITY_ROUNDS``: kill/restart rounds per crash test and damage
  rounds per torn-file test (default 1);
- ``BOLTMQ_FUZZ_EXAMPLES``: Hypothesis examples per property and requests per
  gRPC fuzz run (default 60);
- ``BOLTMQ_BACKLOG_MESSAGES``: messages of the backlog benchmark's run in
  tests/reliability/test_backlog.py (default 0: the test is skipped; ``make
  test`` runs the command small in tests/bench/test_backlog.py instead).

The Makefile's ``test-reliability`` target sets all three. A bad value is one
clear error at collection, never a silent default.
"""

from __future__ import annotations

import os


class ScaleError(ValueError):
    """A scale variable that is not a positive integer."""


def _positive(name: str, default: int, least: int = 1) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScaleError(f"{name}={text!r} is not an integer") from None
    if value < least:
        raise ScaleError(f"{name}={value} must be at least {least}")
    return value


ROUNDS = _positive("BOLTMQ_RELIABILITY_ROUNDS", 1)
"""Crash rounds (kill -9 + restart) and damage rounds per test."""
FUZZ_EXAMPLES = _positive("BOLTMQ_FUZZ_EXAMPLES", 60)
"""Hypothesis examples per decoder property and requests per gRPC fuzz test."""
BACKLOG_MESSAGES = _positive("BOLTMQ_BACKLOG_MESSAGES", 0, least=0)
"""Messages of the backlog run (0: skipped)."""
