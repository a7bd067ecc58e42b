"""PullWire: a Pull answer in its protobuf encoding, built around the records, never re-encoded.

A raw pull answers up to 4 MiB of CommitLog records. Put into a
``PullResponse`` message they were copied four times on the store (mapped file
-> one ``bytes`` -> the message -> its encoding -> gRPC) and twice more on the
broker, which parsed the store's answer and encoded it again for the client:
``memmove`` was 16 % of the store's CPU and 21 % of the broker's while
consuming (bench/RESULTS.md, the consume path's copies). Instead the store writes the
encoding itself, in one join, and the broker forwards those bytes as they are;
the SDK takes the answer as bytes too and sets the records aside as a view of
them (:func:`split_records`), parsing only the rest.

The bytes are standard protobuf encoding of ``boltmq.v1.PullResponse``, so any
client parses them with the generated class. They rest on two rules of the
protobuf encoding: a message may be encoded field by field in any order, and
encodings laid one after the other parse as one message (a later scalar
replaces an earlier one):

Part                 | Bytes                        | Who writes it
---------------------+------------------------------+----------------------------------------
head                 | PullResponse(status, offsets,| the store (``SerializeToString`` of a
                     | record_count).encoding       | message with no records)
records key          | varint (6 << 3 | 2) = 0x32   | the store
records length       | varint, 1-5 bytes            | the store (at most PULL_BYTES_MAX)
records              | the records, back to back    | the store (views of the mapped file)
suggestion, optional | PullResponse(suggest_        | the broker, for a consumer far behind
                     | broker_id).encoding          | (appended: it replaces nothing)

A PullQueues answer (``PullQueuesResponse``, several queues in one call) is built
the same way, one level up: for each answer the answers key (0x0A), the
length of that answer's encoding as a varint, and the answer's parts above;
the broker may append ``PullQueuesResponse(suggest_broker_id)``. Broker and
SDK parse it with protobuf: its answers are many and mostly small (one per
queue, up to 1,024), and walking their framing in Python cost more than
protobuf's copy of the records (bench/RESULTS.md, many topics in one call).

The rejected alternative, a second protobuf message type holding only the
head, would still copy the records while parsing and adds a type clients must
know. :func:`split_records` reads only the framing of the top-level fields
(keys and lengths) and leaves what every field means to protobuf.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from boltmq.v1 import store_pb2

RECORDS_FIELD: Final = store_pb2.PullResponse.DESCRIPTOR.fields_by_name["records"].number
ANSWERS_FIELD: Final = store_pb2.PullQueuesResponse.DESCRIPTOR.fields_by_name["answers"].number
PULL_QUEUES_MAX: Final = 1_024
"""Queues one PullQueues names at most (store and broker refuse more)."""
WIRE_TYPE_VARINT: Final = 0
WIRE_TYPE_I64: Final = 1
WIRE_TYPE_LEN: Final = 2
"""Protobuf wire type of a length-delimited field (bytes, strings, messages)."""
WIRE_TYPE_I32: Final = 5
VARINT_MAX_BYTES: Final = 10
RECORDS_KEY: Final = bytes([RECORDS_FIELD << 3 | WIRE_TYPE_LEN])
ANSWERS_KEY: Final = bytes([ANSWERS_FIELD << 3 | WIRE_TYPE_LEN])
assert RECORDS_FIELD < 16 and ANSWERS_FIELD < 16, "the keys written here must stay one byte"

Parts = list[bytes | memoryview]
"""An encoding as pieces that ``b"".join`` makes whole (records stay views until then)."""


def varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as a protobuf base-128 varint, low group first."""
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{value} does not fit a varint")
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def pull_parts(head: store_pb2.PullResponse, records: Sequence[bytes | memoryview]) -> Parts:
    """The encoding of ``head`` with ``records`` (joined) as its records field, in parts.

    ``head`` must not carry records itself: its own would be replaced, silently.
    """
    if head.records:
        raise ValueError("the head must not carry records: they are passed apart")
    if not records:
        return [head.SerializeToString()]
    length = sum(len(part) for part in records)
    return [head.SerializeToString(), RECORDS_KEY, varint(length), *records]


def encode_pull(head: store_pb2.PullResponse, records: Sequence[bytes | memoryview]) -> bytes:
    """:func:`pull_parts` joined: one copy of the records."""
    return b"".join(pull_parts(head, records))


def encode_pull_queues(answers: Sequence[Parts]) -> bytes:
    """A PullQueuesResponse of ``answers`` (each from :func:`pull_parts`), in one copy."""
    parts: Parts = []
    for answer in answers:
        parts += (ANSWERS_KEY, varint(sum(len(part) for part in answer)), *answer)
    return b"".join(parts)


def split_records(encoded: bytes) -> tuple[store_pb2.PullResponse, memoryview]:
    """The answer parsed without its records, and the records as a view of ``encoded``.

    What a consumer does with a raw pull's bytes: parsing them whole would copy
    the records into the message and again out of it. This walks the top-level
    fields of the encoding (:func:`_fields`), sets the records field aside
    wherever it lies (the last one counts, as when protobuf parses it) and
    parses the rest, a few dozen bytes. DecodeError for bytes that are not a
    whole encoding.
    """
    view = memoryview(encoded)
    pieces: list[bytes] = []
    records = view[0:0]
    piece_start = 0
    for number, start, data_at, end in _fields(encoded):
        if number == RECORDS_FIELD and data_at >= 0:
            pieces.append(encoded[piece_start:start])
            piece_start = end
            records = view[data_at:end]
    pieces.append(encoded[piece_start:])
    return store_pb2.PullResponse.FromString(b"".join(pieces)), records


def answer_frames(encoded: bytes) -> list[memoryview]:
    """Each answer of a PullQueuesResponse's encoding as its whole field (key, length and
    answer), in order, as views of ``encoded``; other fields are left out. DecodeError for
    bytes that are not a whole encoding."""
    view = memoryview(encoded)
    return [
        view[start:end]
        for number, start, data_at, end in _fields(encoded)
        if number == ANSWERS_FIELD and data_at >= 0
    ]


def answer_frame(answer: store_pb2.PullResponse) -> bytes:
    """``answer`` encoded as one answer field of a PullQueuesResponse (a small one: the
    records, if any, are copied)."""
    encoded = answer.SerializeToString()
    return ANSWERS_KEY + varint(len(encoded)) + encoded


def _fields(encoded: bytes) -> Iterator[tuple[int, int, int, int]]:
    """The top-level fields of a protobuf encoding: ``(number, start, data_at, end)``.

    A field is a varint key, then by wire type a varint, 8 bytes, a varint length
    and that many bytes, or 4 bytes; ``data_at`` is where a length-delimited
    field's bytes start (-1 for the other types), ``end`` where the next field
    starts. DecodeError for a field cut short or of an unknown wire type.
    """
    end = len(encoded)
    position = 0
    while position < end:
        key, at = _read_varint(encoded, position)
        wire_type = key & 7
        data_at = -1
        if wire_type == WIRE_TYPE_VARINT:
            at = _read_varint(encoded, at)[1]
        elif wire_type == WIRE_TYPE_I64:
            at += 8
        elif wire_type == WIRE_TYPE_I32:
            at += 4
        elif wire_type == WIRE_TYPE_LEN:
            length, data_at = _read_varint(encoded, at)
            at = data_at + length
        else:
            raise DecodeError(f"wire type {wire_type} of the field at byte {position}")
        if at > end:
            raise DecodeError(f"the field at byte {position} runs past the end ({end} bytes)")
        yield key >> 3, position, data_at, at
        position = at


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    """The varint at ``position`` and where the next field starts; DecodeError if cut."""
    value = shift = 0
    for at in range(position, min(position + VARINT_MAX_BYTES, len(data))):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
    raise DecodeError(f"no whole varint at byte {position}")


@dataclass(slots=True)
class PullAnswer:
    """A store's Pull answer as the broker holds it: parsed to decide, bytes to forward."""

    response: store_pb2.PullResponse
    """The answer parsed without its records (status and offsets decide a long poll)."""
    encoded: bytes
    """The bytes to answer the client with: the store's, plus a suggestion if any."""

    @classmethod
    def parse(cls, encoded: bytes) -> PullAnswer:
        """The answer from the store's bytes (DecodeError when they are not a PullResponse).

        Parsed without the records (:func:`split_records`): the broker never reads them,
        and a whole parse would copy them once more.
        """
        return cls(split_records(encoded)[0], encoded)

    def suggest(self, broker_id: int) -> None:
        """Ask the client to pull from ``broker_id`` for a while (appended to the bytes)."""
        self.response.suggest_broker_id = broker_id
        self.encoded += store_pb2.PullResponse(suggest_broker_id=broker_id).SerializeToString()

    @property
    def record_count(self) -> int:
        """Records (raw pull) or messages in the answer."""
        return self.response.record_count or len(self.response.messages)


@dataclass(slots=True)
class QueuesAnswer:
    """A store's PullQueues answer as the broker holds it, like :class:`PullAnswer`."""

    responses: list[store_pb2.PullResponse]
    """Each queue's answer, in the order of the request's pulls."""
    encoded: bytes
    """The bytes to answer the client with: the store's, plus a suggestion if any."""

    @classmethod
    def parse(cls, encoded: bytes) -> QueuesAnswer:
        """The answer from the store's bytes (DecodeError when they are not one)."""
        return cls(list(store_pb2.PullQueuesResponse.FromString(encoded).answers), encoded)

    @classmethod
    def assemble(
        cls, answers: Sequence[tuple[store_pb2.PullResponse, bytes | memoryview]]
    ) -> QueuesAnswer:
        """An answer of ``(response, frame)`` pairs, frames as :meth:`framed` or
        :func:`answer_frame` give them, joined in one copy."""
        return cls([response for response, _ in answers], b"".join([frame for _, frame in answers]))

    def framed(self) -> list[tuple[store_pb2.PullResponse, memoryview]]:
        """Each queue's answer with its frame in :attr:`encoded`, in order."""
        return list(zip(self.responses, answer_frames(self.encoded), strict=True))

    def suggest(self, broker_id: int) -> None:
        """Ask the client to pull from ``broker_id`` for a while (appended to the bytes)."""
        self.encoded += store_pb2.PullQueuesResponse(
            suggest_broker_id=broker_id
        ).SerializeToString()
