"""RollingCounter: counts over the last minute and hour, with the time passed in."""

from __future__ import annotations

from services.broker.stats.rolling_counter import MINUTE_MS, SECOND_MS, RollingCounter

T0 = 1_000_000 * SECOND_MS  # a whole minute: bucket edges fall on round numbers


def test_counts_within_the_minute_and_the_hour() -> None:
    counter = RollingCounter()
    counter.add(3, T0)
    counter.add(4, T0 + 500)
    counter.add(5, T0 + 59 * SECOND_MS)
    assert counter.last_minute(T0 + 59 * SECOND_MS) == 12
    assert counter.last_hour(T0 + 59 * SECOND_MS) == 12


def test_a_second_leaves_the_minute_sixty_seconds_later() -> None:
    counter = RollingCounter()
    counter.add(3, T0)
    counter.add(5, T0 + SECOND_MS)
    assert counter.last_minute(T0 + 59 * SECOND_MS + 999) == 8
    assert counter.last_minute(T0 + 60 * SECOND_MS) == 5  # T0's second is out
    assert counter.last_minute(T0 + 61 * SECOND_MS) == 0
    assert counter.last_hour(T0 + 61 * SECOND_MS) == 8  # still within the hour


def test_a_reused_bucket_forgets_its_old_second() -> None:
    counter = RollingCounter()
    counter.add(7, T0)
    counter.add(2, T0 + 60 * SECOND_MS)  # the same slot, a minute later
    assert counter.last_minute(T0 + 60 * SECOND_MS) == 2
    assert counter.last_hour(T0 + 60 * SECOND_MS) == 9


def test_a_minute_leaves_the_hour_sixty_minutes_later() -> None:
    counter = RollingCounter()
    counter.add(10, T0)
    counter.add(1, T0 + 30 * MINUTE_MS)
    assert counter.last_hour(T0 + 59 * MINUTE_MS) == 11
    assert counter.last_hour(T0 + 60 * MINUTE_MS) == 1
    counter.add(4, T0 + 120 * MINUTE_MS)  # T0's slot again, two hours on
    assert counter.last_hour(T0 + 120 * MINUTE_MS) == 4
    assert counter.last_minute(T0 + 120 * MINUTE_MS) == 4


def test_a_fresh_counter_counts_nothing() -> None:
    counter = RollingCounter()
    assert (counter.last_minute(0), counter.last_hour(0)) == (0, 0)
    assert (counter.last_minute(T0), counter.last_hour(T0)) == (0, 0)
