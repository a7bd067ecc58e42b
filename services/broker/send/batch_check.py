"""The checks a SendRequest passes before anything of it is stored.

A batch is one topic and one queue (queue_id -1: the broker picks one). A
protobuf batch is checked message by message and refused whole, with
:class:`InvalidArgument` naming the field. A raw batch (records the producer
encoded in the CommitLog format) is checked request first, then header by
header: a record whose header is wrong is refused on its own, with a reason
naming its index, and the others go on.
"""

from __future__ import annotations

from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.record import SYS_FLAG_TRANSACTION_MASK
from boltmq.wire.record_batch import RecordBatch
from boltmq.wire.record_encoding import encode_topic
from boltmq.wire.record_heads import check_heads, sections_contain
from services.broker.config import BrokerConfig
from services.broker.delay.delay_message import DELAY_MARKERS
from services.broker.errors import InvalidArgument
from services.broker.metadata.names import check_group, check_topic


def check_batch(request: broker_pb2.SendRequest, config: BrokerConfig) -> tuple[str, int]:
    """Return (topic, queue_id) of a well-formed batch; raise naming the bad field."""
    messages = request.messages
    if not messages:
        raise InvalidArgument("messages: at least one message is required")
    if len(messages) > config.max_batch_messages:
        raise InvalidArgument(
            f"messages: {len(messages)} messages in one batch, at most {config.max_batch_messages}"
        )
    check_producer(request)
    topic = check_topic("messages[0].topic", messages[0].topic)
    queue_id = messages[0].queue_id
    if queue_id < -1:
        raise InvalidArgument(f"messages[0].queue_id: {queue_id} is neither -1 nor a queue")
    for index, message in enumerate(messages):
        if message.topic != topic:
            raise InvalidArgument(
                f"messages[{index}].topic: a batch goes to one topic "
                f"({message.topic[:60]!r} is not {topic!r})"
            )
        if message.queue_id != queue_id:
            raise InvalidArgument(
                f"messages[{index}].queue_id: a batch goes to one "
                f"queue ({message.queue_id} is not {queue_id})"
            )
        _check_body(index, message, config)
    return topic, queue_id


def check_producer(request: broker_pb2.SendRequest) -> None:
    """Check what every form of send carries beside its batch: producer_group (empty, or a
    group name) and default_topic_queue_nums (not negative)."""
    if request.producer_group:
        check_group("producer_group", request.producer_group)
    if request.default_topic_queue_nums < 0:
        raise InvalidArgument("default_topic_queue_nums: must not be negative")


def _check_body(index: int, message: message_pb2.Message, config: BrokerConfig) -> None:
    size = len(message.body)
    if size == 0:
        raise InvalidArgument(f"messages[{index}].body: must not be empty")
    if size > config.max_message_size_bytes:
        raise InvalidArgument(
            f"messages[{index}].body: {size} bytes, at most {config.max_message_size_bytes}"
        )


def check_records_request(
    request: broker_pb2.SendRequest, records: bytes, config: BrokerConfig
) -> tuple[str, int]:
    """Return (topic, queue_id) of a well-formed raw request; raise naming the bad field."""
    if request.messages:
        raise InvalidArgument("records: send messages or records, not both")
    check_producer(request)
    return check_raw_fields(request, records, config)


def check_raw_fields(
    batch: broker_pb2.SendRequest | broker_pb2.SendSection, records: bytes, config: BrokerConfig
) -> tuple[str, int]:
    """Return (topic, queue_id) of a raw request's or a section's batch fields
    (``record_count``, ``records``, ``topic``, ``queue_id``); raise naming the bad field."""
    count = batch.record_count
    if not 0 < count <= config.max_batch_messages:
        raise InvalidArgument(
            f"record_count: {count} records in one batch; 1..{config.max_batch_messages}"
        )
    if not records:
        raise InvalidArgument(f"records: empty, but record_count is {count}")
    topic = check_topic("topic", batch.topic)
    if batch.queue_id < -1:
        raise InvalidArgument(f"queue_id: {batch.queue_id} is neither -1 nor a queue")
    return topic, batch.queue_id


def check_headers(
    batch: RecordBatch, positions: list[int], config: BrokerConfig
) -> tuple[dict[int, str], bool]:
    """Why each record whose header is wrong is refused, by index; and whether any
    record's properties may ask for a delay.

    All heads are checked at once (:func:`check_heads`), and only the good
    records' properties sections are searched for the delay names (a search
    over the whole batch cost ~0.8 ms per MB of bodies).
    """
    topic_field, magic = encode_topic(batch.topic)
    checked = check_heads(
        batch.records, positions, topic_field, magic, config.max_message_size_bytes
    )
    refused = {index: f"records[{index}]: {exc}" for index, exc in checked.refused.items()}
    starts, ends = checked.properties_starts, checked.ends
    if refused:
        starts, ends = (
            [x for i, x in enumerate(column) if i not in refused] for column in (starts, ends)
        )
    delayed = sections_contain(batch.records, starts, ends, DELAY_MARKERS)
    for index in checked.flagged(SYS_FLAG_TRANSACTION_MASK):
        if index not in refused:
            refused[index] = transaction_refusal(index)
    return refused, delayed


def transaction_refusal(index: int) -> str:
    """Why record ``index`` of a send is refused when its sys flag has transaction bits.

    Half messages go through the transaction service, and markers are the
    broker's own records: a client setting these bits would commit or hide
    messages behind its back."""
    return (
        f"records[{index}]: sys_flag has transaction bits; send "
        f"transactional messages with TransactionProducer"
    )
