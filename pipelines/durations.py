"""Durations on the command line: ``500ms``, ``30s``, ``5m``, ``1h``, ``2d``.

One parser for every job's window, slide and watermark arguments, so a typo is
caught by argparse (one line, exit 2) instead of deep inside Spark's planner.
Spark receives the same duration as an interval string (``"30 seconds"``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Final

UNIT_MS: Final = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SPARK_UNIT: Final = {
    "ms": "milliseconds",
    "s": "seconds",
    "m": "minutes",
    "h": "hours",
    "d": "days",
}
_PATTERN: Final = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
FORM: Final = "a whole number and a unit: 500ms, 30s, 5m, 1h or 2d"


@dataclass(frozen=True)
class Duration:
    """A positive length of time, exactly as the user wrote it."""

    amount: int
    unit: str

    @property
    def ms(self) -> int:
        """The length in milliseconds."""
        return self.amount * UNIT_MS[self.unit]

    @property
    def spark(self) -> str:
        """The interval string Spark's ``window()`` and ``withWatermark()`` take."""
        return f"{self.amount} {_SPARK_UNIT[self.unit]}"

    def __str__(self) -> str:
        return f"{self.amount}{self.unit}"


def parse_duration(text: str) -> Duration:
    """``Duration`` from ``"30s"``; ValueError naming the accepted form otherwise."""
    match = _PATTERN.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration: expected {FORM}")
    duration = Duration(int(match.group(1)), match.group(2))
    if duration.ms <= 0:
        raise ValueError(f"{text!r}: a duration must be longer than zero")
    return duration


def duration_arg(text: str) -> Duration:
    """argparse ``type=``: the same parse, reported as a usage error."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int_arg(text: str) -> int:
    """argparse ``type=`` for counts: a whole number of at least 1."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return number
