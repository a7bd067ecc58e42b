"""The BoltMQ message store: CommitLog, ConsumeQueue and IndexFile on mmap'd files.

The embedding API::

    from services.store import MessageStore, StoreConfig, StoreMessage, PutStatus, GetStatus
"""

from services.store.config import StoreConfig
from services.store.message import MessageExt, StoreMessage
from services.store.status import GetResult, GetStatus, PutResult, PutStatus
from services.store.store import MessageStore, StoreLocked

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
