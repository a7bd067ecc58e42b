"""Where a master resumes a replica, from the replica's first report (docs/ha.md, "Epochs").

Pure: the master's servicer feeds it the replica's report and its own
store's info, and sends the result in the handshake chunk. The rules, in the
order they are applied:

1. An empty replica (max offset 0) starts at the beginning of the master's
   last segment (``LAST_SEGMENT``: a new replica need not copy days of
   history) or at the master's min offset (``FIRST_SEGMENT``: a full copy);
   never below the master's min offset.
2. A replica whose epoch is newer than the master's holds data this master
   never had: it is following the wrong (stale) master, and is refused.
3. A replica of an older epoch whose CommitLog reaches past the start of the
   first master epoch newer than its own holds a tail that diverged from the
   master's (it was written by a master that lost its role): it truncates to
   that start offset and resumes there.
4. A replica ahead of the master within the same epoch truncates to the
   master's max offset (the master lost an unreplicated tail, e.g. a crash
   without flush, and the replica must not keep bytes the master will reuse).
5. A replica whose end lies below the master's min offset cannot resume: the
   bytes in between were deleted on the master.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.ha.errors import CannotResume

NO_TRUNCATION = -1
"""``truncate_to`` when the replica keeps everything it has."""
LAST_SEGMENT = "LAST_SEGMENT"
FIRST_SEGMENT = "FIRST_SEGMENT"


@dataclass(frozen=True, slots=True)
class MasterView:
    """What the master's store says of itself (from GetStoreInfo)."""

    min_offset: int
    max_offset: int
    epoch: int
    epochs: Sequence[tuple[int, int]]
    """``(epoch, start_offset)`` oldest first."""
    segment_bytes: int


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """Where the stream starts and what the replica cuts first."""

    start_offset: int
    truncate_to: int = NO_TRUNCATION


def plan_resume(
    replica_max_offset: int,
    replica_epoch: int,
    master: MasterView,
    replica_start: str = LAST_SEGMENT,
) -> ResumePlan:
    """The resume plan for a replica; CannotResume when there is none."""
    if replica_max_offset < 0:
        raise CannotResume(f"replica reported a negative max offset {replica_max_offset}")
    if replica_max_offset == 0:
        return ResumePlan(_empty_start(master, replica_start))
    if replica_epoch > master.epoch:
        raise CannotResume(
            f"replica holds data of epoch {replica_epoch}, newer than this master's epoch "
            f"{master.epoch}: it must follow the current master, not this one"
        )
    plan = ResumePlan(replica_max_offset)
    if replica_epoch < master.epoch:
        diverged_at = first_newer_epoch_start(master.epochs, replica_epoch)
        if diverged_at is not None and replica_max_offset > diverged_at:
            plan = ResumePlan(diverged_at, diverged_at)
    if plan.truncate_to == NO_TRUNCATION and replica_max_offset > master.max_offset:
        plan = ResumePlan(master.max_offset, master.max_offset)
    if plan.start_offset < master.min_offset:
        raise CannotResume(
            f"replica's CommitLog ends at {plan.start_offset}, but the master's now starts at "
            f"{master.min_offset} (older segments were deleted): empty the replica store and "
            f"start it again to copy from the master's segments"
        )
    return plan


def _empty_start(master: MasterView, replica_start: str) -> int:
    """Where an empty replica starts."""
    if replica_start == FIRST_SEGMENT:
        return master.min_offset
    if master.segment_bytes <= 0:
        raise CannotResume("the master's store reports no segment size")
    last_segment_start = master.max_offset - master.max_offset % master.segment_bytes
    return max(last_segment_start, master.min_offset)


def first_newer_epoch_start(epochs: Sequence[tuple[int, int]], epoch: int) -> int | None:
    """Start offset of the first epoch newer than ``epoch`` (None: no newer epoch)."""
    newer = [(candidate, start_offset) for candidate, start_offset in epochs if candidate > epoch]
    return min(newer)[1] if newer else None
