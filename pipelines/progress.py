"""A rich progress bar per step of a batch job, fed by Spark's status tracker.

Each step runs its Spark actions under a job group of its own; a background
thread polls ``statusTracker()`` for that group's jobs and shows tasks done
out of tasks known so far (a job's later stages are counted once Spark plans
them, so the total can grow while a step runs). The actions themselves run in
the caller's thread, so their errors reach the caller unchanged.

Polling was chosen over a ``SparkListener``: listeners are JVM classes, and a
Py4J callback server for one progress bar is heavier than a poll every
``POLL_INTERVAL_S``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

POLL_INTERVAL_S: Final = 0.2
JOB_GROUP_PROPERTY: Final = "spark.jobGroup.id"


@dataclass(frozen=True)
class TaskCount:
    """Tasks of one step's jobs: done and known."""

    completed: int
    total: int
    jobs: int


def count_tasks(tracker: Any, group: str) -> TaskCount:
    """Tasks of every job of ``group``; a finished job's stages count as done.

    A finished job's skipped stages (their shuffle output was reused) never run
    a task, and its stages may already have been dropped from the tracker.
    """
    completed = total = 0
    job_ids = tracker.getJobIdsForGroup(group)
    for job_id in job_ids:
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            total += stage.numTasks
            done = job.status == "SUCCEEDED"
            completed += stage.numTasks if done else stage.numCompletedTasks
    return TaskCount(completed, total, len(job_ids))


class SparkProgress:
    """``with SparkProgress(spark) as progress: with progress.step("write"): ...``."""

    def __init__(self, spark: Any, *, enabled: bool = True) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._context = spark.sparkContext
        self._bar = Progress(
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TextColumn("{task.fields[jobs]} jobs"),
            TimeElapsedColumn(),
            disable=not enabled,
        )
        self._steps = 0

    def __enter__(self) -> SparkProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        """Run the block's Spark actions as one step with its own bar."""
        self._steps += 1
        group = f"pipelines-step-{self._steps}"
        task = self._bar.add_task(description, total=None, jobs=0)
        stop = threading.Event()
        tracker = self._context.statusTracker()

        def poll() -> None:
            while not stop.wait(POLL_INTERVAL_S):
                self._show(task, count_tasks(tracker, group))

        self._context.setJobGroup(group, description)
        poller = threading.Thread(target=poll, name=f"progress-{group}", daemon=True)
        poller.start()
        try:
            yield
        finally:
            stop.set()
            poller.join()
            self._context.setLocalProperty(JOB_GROUP_PROPERTY, None)
        count = count_tasks(tracker, group)
        self._show(task, count)
        self._bar.update(task, completed=count.total, total=count.total)

    def _show(self, task: Any, count: TaskCount) -> None:
        self._bar.update(
            task, completed=count.completed, total=count.total or None, jobs=count.jobs
        )
