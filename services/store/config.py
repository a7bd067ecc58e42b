"""StoreConfig: every setting of the message store, RocketMQ's names in snake_case.

Loaded through :func:`boltmq.kernel.config.load_config` (defaults, TOML file,
``BOLTMQ_*`` environment, flags). Validation happens in ``__post_init__`` so a
bad value is one clear error at start-up, never a surprise at run time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from boltmq.kernel.config import CallerLimitSettings, ConfigError

FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
_DELETE_WHEN = re.compile(r"^\d{2}(;\d{2})*$")
COLD_READ_THREADS_MAX = 64
_TRANSFER_LIMITS = (
    "max_transfer_count_on_message_in_memory",
    "max_transfer_bytes_on_message_in_memory",
    "max_transfer_count_on_message_in_disk",
    "max_transfer_bytes_on_message_in_disk",
)


@dataclass(frozen=True)
class StoreConfig(CallerLimitSettings):
    """Settings of one message store."""

    root_dir: Path = field(default_factory=lambda: Path("~/store").expanduser())
    """Directory holding commitlog/, consumequeue/, index/, checkpoint, abort, lock, config/."""
    mapped_file_size_commitlog: int = 1024 * 1024 * 1024
    """Bytes per CommitLog segment file."""
    mapped_file_size_consume_queue: int = 300_000 * 20
    """Bytes per consume-queue file (rounded up to a multiple of 20)."""
    max_hash_slot_num: int = 5_000_000
    """Hash slots per index file."""
    max_index_num: int = 20_000_000
    """Entries per index file; a full file starts a new one."""
    flush_disk_type: str = "ASYNC_FLUSH"
    """ASYNC_FLUSH (background flusher) or SYNC_FLUSH (group commit before the ack)."""
    flush_interval_commitlog_ms: int = 500
    """How often the async flusher looks for dirty pages."""
    flush_commitlog_least_pages: int = 4
    """Dirty 4 KiB pages needed before an async flush."""
    flush_commitlog_thorough_interval_ms: int = 10_000
    """An async flush of whatever is dirty at least this often."""
    flush_interval_consume_queue_ms: int = 1_000
    """How often consume queues and the index are flushed."""
    flush_consume_queue_least_pages: int = 2
    """Dirty pages needed before a consume-queue flush."""
    flush_consume_queue_thorough_interval_ms: int = 60_000
    """A consume-queue flush of whatever is dirty at least this often."""
    sync_flush_timeout_ms: int = 5_000
    """How long a SYNC_FLUSH append waits for its fsync before FLUSH_DISK_TIMEOUT."""
    file_reserved_time_h: float = 72
    """Age after which a CommitLog segment may be deleted."""
    delete_when: str = "04"
    """Hours (``HH`` or ``HH;HH``) in which expired segments are deleted."""
    clean_resource_interval_ms: int = 10_000
    """How often the cleaner runs."""
    delete_commitlog_files_interval_ms: int = 100
    """Pause between two segment deletions in one cleaner run."""
    delete_files_batch_max: int = 10
    """Segments deleted per cleaner run at most."""
    destroy_mapped_file_forcibly_interval_ms: int = 120_000
    """A deleted file still referenced by readers is unmapped after this long anyway."""
    disk_max_used_space_ratio: int = 75
    """Disk usage (%) above which expired segments are deleted at any hour."""
    disk_space_clean_forcibly_ratio: int = 85
    """Disk usage (%) above which the oldest segments are deleted regardless of age."""
    disk_space_warning_level_ratio: int = 90
    """Disk usage (%) above which writes are refused with SERVICE_NOT_AVAILABLE."""
    max_message_size_bytes: int = 4 * 1024 * 1024
    """Largest body accepted."""
    check_crc_on_recover: bool = True
    """Verify body CRCs while recovering."""
    check_crc_on_read: bool = True
    """Verify body CRCs on every read."""
    broker_role: str = "ASYNC_MASTER"
    """ASYNC_MASTER, SYNC_MASTER or SLAVE (a SLAVE store refuses client writes)."""
    ha_max_gap_not_in_sync_bytes: int = 256 * 1024 * 1024
    """A replica further behind than this does not count as in sync."""
    slave_timeout_ms: int = 3_000
    """SYNC_MASTER: how long an append waits for a replica ack."""
    read_confirmed_only: bool = True
    """SYNC_MASTER and replicas: consumers see only what a replica has acknowledged (the
    confirm offset, ``docs/ha.md``), so a failover never takes back a message delivered."""
    promoted_broker_role: str = "ASYNC_MASTER"
    """The role a replica store takes when promoted (ASYNC_MASTER or SYNC_MASTER); a store
    configured as a master (``broker_role``) takes that role again when promoted."""
    store_host: str = "127.0.0.1"
    """Address written as store host and into message ids."""
    store_port: int = 10911
    """Port written as store host and into message ids."""
    listen_host: str = "127.0.0.1"
    """Address the store service binds (``0.0.0.0`` in a container)."""
    listen_port: int = 10913
    """gRPC port of the store service (0: any free port, printed in the READY line)."""
    arrival_watch_queue_max: int = 65536
    """Queues with a pending arrival kept per WatchArrivals stream (older ones coalesce)."""
    warm_mapped_file_ahead_bytes: int = 0
    """Fault in the active CommitLog segment this far ahead of the writer (0: off, the
    default: the CommitLog is written with pwrite, which allocates fresh pages for less
    than faulting them in costs; a warmer would only add the fault)."""
    commitlog_page_cache_window_bytes: int = 1024 * 1024 * 1024
    """Flushed CommitLog bytes kept in the page cache behind the flushed offset; older pages
    are released after each flush round (services/store/page_cache.py: bounded memory under
    a pod's limit, and new writes reuse pages instead of taking fresh ones). 0: never."""
    consume_queue_page_cache_window_bytes: int = 256 * 1024
    """Flushed bytes of each consume queue kept mapped behind its flushed end (13,107
    entries); older pages are released after each consume-queue flush round and swept
    again every 10 s (services/store/page_cache.py), so a large backlog does not keep its
    20 B a message of entries in memory. Per queue: a store of 1,024 busy queues keeps
    1,024 times this (and up to 256 KiB more each). 0: never."""
    index_page_cache_window_bytes: int = 4 * 1024 * 1024
    """Flushed index entries kept mapped behind the end of the newest index file's flushed
    entries (209,715 entries: lookups of recent keys need no disk read); older entry pages
    are released after each consume-queue flush round, and index files no longer written
    (full) are released whole, all swept again every 10 s (services/store/index_window.py),
    so the 20 B a message of UNIQ_KEY entries do not stay in memory. The newest file's
    slot table (4 B x ``max_hash_slot_num``) stays, as does up to 2 MiB more than the
    window. 0: never."""
    max_queue_id: int = 1023
    """Largest queue id accepted for a topic."""
    max_transfer_count_on_message_in_memory: int = 32
    """Default and upper bound of messages returned by one get (RocketMQ's pull batch is 32)."""
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    """Bytes returned by one get at most (one message always fits)."""
    max_transfer_count_on_message_in_disk: int = 1024
    """Messages one pull returns at most when it is a cold read: its first record lies more
    than ``commitlog_page_cache_window_bytes`` behind the CommitLog's end, where the window
    has released its pages, so they come from disk (``docs/store-reads.md``: RocketMQ's 8
    cost this store ten times the CPU a message)."""
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    """Bytes one cold pull returns at most (one message always fits)."""
    max_cold_share_bytes: int = 4 * 1024 * 1024
    """Bytes a cold pull of a PullQueues call may take at most as its even share of the
    call's bytes, when that share is more than ``max_transfer_bytes_on_message_in_disk``
    (a consumer of few queues far behind); 0: no share, every cold pull held to that
    limit."""
    cold_read_threads: int = 1
    """Threads that serve the pulls starting behind the page-cache window (cold reads), so
    the event loop that serves the hot ones does not wait for them; 0: every pull on the
    event loop."""
    max_get_scan_entries: int = 16_000
    """Consume-queue entries scanned by one filtered get at most."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "root_dir", Path(self.root_dir).expanduser())
        if self.flush_disk_type not in FLUSH_DISK_TYPES:
            raise ConfigError(f"flush_disk_type must be one of {FLUSH_DISK_TYPES}")
        if self.broker_role not in BROKER_ROLES:
            raise ConfigError(f"broker_role must be one of {BROKER_ROLES}")
        if self.promoted_broker_role not in BROKER_ROLES[:2]:
            raise ConfigError(f"promoted_broker_role must be one of {BROKER_ROLES[:2]}")
        if self.mapped_file_size_commitlog < 4096:
            raise ConfigError("mapped_file_size_commitlog must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue < 20:
            raise ConfigError("mapped_file_size_consume_queue must hold one 20-byte entry")
        if self.max_hash_slot_num < 1 or self.max_index_num < 2:
            raise ConfigError("max_hash_slot_num must be >= 1 and max_index_num >= 2")
        if not _DELETE_WHEN.fullmatch(self.delete_when):
            raise ConfigError(
                f"delete_when must look like '04' or '04;16', got {self.delete_when!r}"
            )
        ratios = (
            self.disk_max_used_space_ratio,
            self.disk_space_clean_forcibly_ratio,
            self.disk_space_warning_level_ratio,
        )
        if not all(1 <= r <= 100 for r in ratios):
            raise ConfigError("disk ratios must be between 1 and 100")
        if self.max_message_size_bytes < 0:
            raise ConfigError("max_message_size_bytes must not be negative")
        if self.commitlog_page_cache_window_bytes < 0:
            raise ConfigError("commitlog_page_cache_window_bytes must not be negative (0: off)")
        if self.consume_queue_page_cache_window_bytes < 0:
            raise ConfigError("consume_queue_page_cache_window_bytes must not be negative (0: off)")
        if self.index_page_cache_window_bytes < 0:
            raise ConfigError("index_page_cache_window_bytes must not be negative (0: off)")
        if not 0 <= self.cold_read_threads <= COLD_READ_THREADS_MAX:
            raise ConfigError(
                f"cold_read_threads must be between 0 and {COLD_READ_THREADS_MAX}, "
                f"got {self.cold_read_threads}"
            )
        for name in _TRANSFER_LIMITS:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_cold_share_bytes < 0:
            raise ConfigError(
                f"max_cold_share_bytes must be at least 0, got {self.max_cold_share_bytes}"
            )

    @property
    def consume_queue_file_size(self) -> int:
        """The consume-queue file size rounded up to whole 20-byte entries."""
        return -(-self.mapped_file_size_consume_queue // 20) * 20

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"
