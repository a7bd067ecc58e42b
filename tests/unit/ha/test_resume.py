"""Resume rules of a replica's first report (services/ha/resume.py)."""

from __future__ import annotations

import pytest

from services.ha.errors import CannotResume
from services.ha.resume import (
    FIRST_SEGMENT,
    NO_TRUNCATION,
    MasterView,
    ResumePlan,
    first_newer_epoch_start,
    plan_resume,
)

SEGMENT = 1000


def master(
    min_offset: int = 0,
    max_offset: int = 3500,
    epoch: int = 0,
    epochs: tuple[tuple[int, int], ...] = ((0, 0),),
) -> MasterView:
    return MasterView(min_offset, max_offset, epoch, epochs, SEGMENT)


def test_an_empty_replica_starts_at_the_last_segment_or_the_first() -> None:
    assert plan_resume(0, 0, master()) == ResumePlan(3000, NO_TRUNCATION)
    assert plan_resume(0, 0, master(max_offset=3000)) == ResumePlan(3000)
    assert plan_resume(0, 0, master(max_offset=0)) == ResumePlan(0)
    assert plan_resume(0, 0, master(min_offset=2000), FIRST_SEGMENT) == ResumePlan(2000)
    assert plan_resume(0, 0, master(), FIRST_SEGMENT) == ResumePlan(0)
    # Never below the master's min offset, even if the last segment start were.
    assert plan_resume(0, 0, master(min_offset=3200, max_offset=3500)) == ResumePlan(3200)


def test_a_replica_in_step_resumes_where_it_ends() -> None:
    assert plan_resume(2345, 0, master()) == ResumePlan(2345)
    assert plan_resume(3500, 0, master()) == ResumePlan(3500)
    assert plan_resume(2345, 3, master(epoch=3, epochs=((0, 0), (3, 100)))) == ResumePlan(2345)


def test_a_replica_ahead_within_the_epoch_truncates_to_the_masters_end() -> None:
    assert plan_resume(4000, 0, master()) == ResumePlan(3500, 3500)


def test_a_replica_of_an_older_epoch_drops_its_diverged_tail() -> None:
    history = ((0, 0), (2, 1800), (5, 3000))
    # Epoch 1 data past the start of epoch 2 diverged: cut at 1800.
    assert plan_resume(2500, 1, master(epoch=5, epochs=history)) == ResumePlan(1800, 1800)
    # Ahead of the master too: the epoch cut wins (it is the earlier one).
    assert plan_resume(9000, 0, master(epoch=5, epochs=history)) == ResumePlan(1800, 1800)
    assert plan_resume(3200, 2, master(epoch=5, epochs=history)) == ResumePlan(3000, 3000)
    # Ending at or before the next epoch's start: nothing diverged.
    assert plan_resume(1800, 1, master(epoch=5, epochs=history)) == ResumePlan(1800)
    assert plan_resume(1200, 0, master(epoch=5, epochs=history)) == ResumePlan(1200)


def test_a_replica_of_a_newer_epoch_or_behind_the_masters_start_is_refused() -> None:
    with pytest.raises(CannotResume, match="newer than this master's epoch 1"):
        plan_resume(100, 2, master(epoch=1))
    with pytest.raises(CannotResume, match="ends at 500, but the master's now starts at 2000"):
        plan_resume(500, 0, master(min_offset=2000))
    with pytest.raises(CannotResume, match="negative"):
        plan_resume(-1, 0, master())
    # A cut below the master's min offset cannot resume either.
    with pytest.raises(CannotResume, match="starts at 2000"):
        plan_resume(2500, 0, master(min_offset=2000, epoch=1, epochs=((0, 0), (1, 1500))))


def test_first_newer_epoch_start_ignores_the_order_given() -> None:
    assert first_newer_epoch_start([(5, 300), (2, 100), (0, 0)], 1) == 100
    assert first_newer_epoch_start([(0, 0)], 0) is None
    assert first_newer_epoch_start([], 7) is None
