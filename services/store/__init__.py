"""The BoltMQ message store: CommitLog, ConsumeQueue and IndexFile on mmap'd files.

The embedding API::

    from services.store import MessageStore, StoreConfig, Message, PutStatus, GetStatus
"""

from services.store.config import StoreConfig
from services.store.message import Message, MessageExt
from services.store.status import GetResult, GetStatus, PutResult, PutStatus
from services.store.store import MessageStore, StoreLocked

__all__ = [
    "GetResult",
    "GetStatus",
    "Message",
    "MessageExt",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "StoreConfig",
    "StoreLocked",
]
