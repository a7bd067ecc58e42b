"""Reading and writing the broker's JSON metadata documents.

The bytes come back from the store, which only keeps them; whatever they hold
is checked here and a document that is not what the broker writes raises
:class:`CorruptMetadata` naming the file, never a bare ``KeyError``.
"""

from __future__ import annotations

import json
from typing import Any

from services.broker.errors import CorruptMetadata


def dump(document: dict[str, Any]) -> bytes:
    """Encode a document the way every metadata file is written (sorted, indented)."""
    return json.dumps(document, indent=1, sort_keys=True).encode()


def parse_object(file_name: str, data: bytes) -> dict[str, Any]:
    """Decode ``data`` as a JSON object, or raise CorruptMetadata naming ``file_name``."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptMetadata(f"{file_name} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CorruptMetadata(f"{file_name} is not a JSON object")
    return document


def get_object(file_name: str, document: dict[str, Any], key: str) -> dict[str, Any]:
    """``document[key]`` when it is an object ({} when absent), else CorruptMetadata."""
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise CorruptMetadata(f"{file_name}: {key} is not a JSON object")
    return value


def get_int(file_name: str, document: dict[str, Any], key: str, default: int = 0) -> int:
    """``document[key]`` when it is an integer (``default`` when absent), else CorruptMetadata."""
    value = document.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptMetadata(f"{file_name}: {key} is not an integer: {value!r:.40}")
    return value
