"""The BoltMQ message store: CommitLog, ConsumeQueue and IndexFile on mmap'd files.

The embedding API::

    from services.store import MessageStore, StoreConfig, StoreMessage, PutStatus, GetStatus

The on-disk formats are in ``docs/store-format.md``, replication in
``docs/ha.md``. The modules, grouped, each with what it owns:

The facade and what it composes
    store             MessageStore: starts, stops and wires the parts; the append's waits
    reader            MessageReader: a pull's read algorithm, lookups, queries by key
    role_changes      RoleChanges: the current role, promotion, demotion, truncation
    config            StoreConfig: every setting of one store
    message           StoreMessage (what is appended) and MessageLike
    status            PutStatus, GetStatus and the results returned as values
    errors            BadRequest, Rejected, StoreNotRunning, StoreLocked
    metrics           the store's OpenTelemetry instruments

The CommitLog and what derives from it
    commitlog         CommitLog: segments, queue-offset counters, message appends, reads
    record_copy       client-encoded records (a RecordBatch) checked, copied, patched
    record_scan       record boundaries: walking segments, HA chunks a replica accepts
    chunk_records     a replicated chunk checked and turned into dispatch requests at once
    dispatcher        Dispatcher: consume-queue and index entries from new records
    dispatch_run      DispatchRun: a bulk append's dispatch requests as columns
    consume_queue     ConsumeQueue(Table): 20-byte entries per topic and queue
    index_file        IndexFile: the hash index file's format
    index_service     IndexService: the index files, put and query by key
    index_window      IndexPageCacheWindow: release of index pages behind a window

Files, durability and space
    mapped_file       MappedFile: one memory-mapped file and its positions
    mapped_file_queue MappedFileQueue: a directory of equal-sized files
    page_cache        PageCacheWindow: read-ahead and release of CommitLog and queue pages
    page_warmer       PageWarmer: faulting in the pages the next appends write
    flusher           CommitLogFlusher and ConsumeQueueFlusher: group commit, fsync
    offset_gate       OffsetGate: waits for an offset (flushed, replicated)
    checkpoint        Checkpoint: the last durable offsets and timestamps
    recovery          recover(): one consistent state after a clean or a crashed stop
    verify            verify_store() and the offline checks: every inconsistency
    cleaner           Cleaner: deletes expired segments, watches disk usage

Replication and metadata
    role              RoleState and RoleFile (``ha/role.json``)
    replica_tracker   ReplicaTracker: the replicas' acked offsets (SYNC_MASTER waits)
    config_files      ConfigFiles: the broker's JSON metadata under ``config/``

The gRPC service
    server            create_server / serve: the store as a StoreService server
    servicer          StoreServicer: each RPC, a few lines over the modules below
    request_checks    every request field checked; the request limits
    proto_conversion  domain objects in their ``boltmq.v1`` wire forms
    arrival_streams   WatchArrivals and WatchQueues, and their arrival listeners
    replication       ReadCommitLog, AppendRaw(Stream), Truncate, SetRole, ReportReplicas
    open_streams      OpenStreams: the endless streams, ended at shutdown
"""

from services.store.config import StoreConfig
from services.store.errors import StoreLocked
from services.store.message import MessageExt, StoreMessage
from services.store.status import GetResult, GetStatus, PutResult, PutStatus
from services.store.store import MessageStore

__all__ = [
    "GetResult",
    "GetStatus",
    "MessageExt",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "StoreConfig",
    "StoreLocked",
    "StoreMessage",
]
