"""``reset-offset --to-time``: epoch ms or ISO-8601 with a zone, exact to the ms."""

from __future__ import annotations

import click
import pytest

from boltmq.cli.offsets import parse_time_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("1767225600123", 1_767_225_600_123),
        ("2026-01-01T00:00:00Z", 1_767_225_600_000),
        ("2026-01-01T01:00:00.123+01:00", 1_767_225_600_123),
        ("2026-01-01T00:00:00.999999+00:00", 1_767_225_600_999),
    ],
)
def test_times_are_read_to_the_millisecond(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "is neither epoch milliseconds nor an ISO-8601 time"),
        ("-1", "is neither epoch milliseconds"),
        ("1.5", "is neither epoch milliseconds"),
        ("next tuesday", "is neither epoch milliseconds"),
        ("2026-01-01T00:00:00", "has no time zone"),
        ("2026-01-01", "has no time zone"),
        ("1960-01-01T00:00:00Z", "is before 1970-01-01T00:00:00Z"),
    ],
)
def test_bad_times_are_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(click.BadParameter, match=why):
        parse_time_ms(text)
