"""Memory policy for processes that move large gRPC messages: the C allocator's
trimming and Python's cyclic garbage collector.

Every batch call allocates and frees buffers of a few hundred KiB (the request,
its serialized form, the bytes handed to the store). With glibc's defaults such
a buffer is mmap'd or the heap top is trimmed after each free, so the next call
page-faults its memory in again: measured on the 2-core VM with 287 KB calls,
the servers spent 25-35 % of their CPU in those faults (bench/RESULTS.md,
the cluster benchmark). Keeping freed memory in the heap (raise the mmap and trim thresholds)
removes them, at the price of up to ``TRIM_THRESHOLD_BYTES`` of retained heap.

The environment variables MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ do
the same, but a process started by Kubernetes or by hand would not get them;
``mallopt`` at start-up always applies. Non-glibc platforms are left alone.

The cyclic collector: a 1,024-message batch allocates several thousand tuples
and lists, so with Python's default thresholds (700, 10, 10) the collector ran
every fraction of a batch and, every so often, walked the whole heap of
long-lived objects (gRPC, protobuf, the store's files). Profiled on the store
under produce load, ``gc_collect_main`` took 15 % of the serving thread.
:func:`settle_garbage_collector` moves what exists after start-up into the
permanent generation (``gc.freeze``) and raises the young-generation threshold;
reference counting still frees every acyclic object at once, so only cyclic
garbage waits a little longer. Spark's Python workers get the same once, at
their first task of ours (:func:`settle_garbage_collector_once`): a worker
holds pyspark, pyarrow and numpy, and the collector's walks of that heap took
a fifth of a commitlog-reading worker's CPU (bench/RESULTS.md, Spark).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from typing import Final

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD: Final = -1
M_TOP_PAD: Final = -2
M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 32 * 1024 * 1024
"""Allocations below this come from the heap (glibc's maximum on 64-bit)."""
TRIM_THRESHOLD_BYTES: Final = 256 * 1024 * 1024
"""Free memory at the heap top kept before returning it to the system."""
TOP_PAD_BYTES: Final = 64 * 1024 * 1024
"""Extra heap requested per growth, so steady batch traffic stops growing it."""
GC_THRESHOLDS: Final = (50_000, 20, 20)
"""Collector thresholds after start-up: young allocations, then generation ratios."""


def keep_freed_memory() -> bool:
    """Apply the thresholds above; False (and nothing changed) without glibc's mallopt."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = all(
        mallopt(option, value) == 1
        for option, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
            (M_TOP_PAD, TOP_PAD_BYTES),
        )
    )
    if not done:
        log.info("mallopt refused the allocator thresholds; keeping the defaults")
    return done


_settled = False
"""Has :func:`settle_garbage_collector` run in this process?"""


def settle_garbage_collector() -> None:
    """Freeze the start-up heap out of the collector's reach and collect less often."""
    global _settled
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    _settled = True


def settle_garbage_collector_once() -> None:
    """:func:`settle_garbage_collector`, unless this process has already run it."""
    if not _settled:
        settle_garbage_collector()
