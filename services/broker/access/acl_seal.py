"""The ACL document sealed for a replica's broker: GetMetadata never carries a secret key.

A replica's broker copies its master's metadata with GetMetadata (an admin
call, :mod:`services.broker.cluster.metadata_sync`) and needs the ACL's secret
keys to check signatures after a failover. The master answers the document
only to the brokers' own account (its ``access_key`` setting, which every
broker of the cluster shares) and only sealed, under ``plain_acl.json.sealed``:

    b"boltmq-acl-seal-1:" + nonce (12 bytes) + AES-256-GCM(document, aad=access key)

with the key HKDF-SHA256(secret key, salt ``boltmq acl copy``, info access key).
Only a holder of that account's secret opens it; a proxy's log, a dump of the
answer or another admin account sees no secret. Sending the document in the
clear to any admin account was rejected: an admin could read every account's
secret and sign as it without a trace. The POP receipt-handle secret travels the
same way (``popSecret.json.sealed``, :mod:`services.broker.metadata.pop_state`).
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SEALED_ACL_FILE = "plain_acl.json.sealed"
"""Name of the sealed document in GetMetadata's answer (never a file in the store)."""
_MAGIC = b"boltmq-acl-seal-1:"
_NONCE_BYTES = 12
_SALT = b"boltmq acl copy"


class UnsealFailed(ValueError):
    """A sealed document that this account's secret does not open."""


def _key(access_key: str, secret_key: str) -> AESGCM:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=_SALT, info=access_key.encode()
    ).derive(secret_key.encode())
    return AESGCM(derived)


def seal(document: bytes, access_key: str, secret_key: str) -> bytes:
    """``document`` sealed for the holder of ``secret_key`` (see the module docstring)."""
    nonce = os.urandom(_NONCE_BYTES)
    sealed = _key(access_key, secret_key).encrypt(nonce, document, access_key.encode())
    return _MAGIC + nonce + sealed


def unseal(sealed: bytes, access_key: str, secret_key: str) -> bytes:
    """The document :func:`seal` sealed for this account; UnsealFailed otherwise."""
    if not sealed.startswith(_MAGIC) or len(sealed) < len(_MAGIC) + _NONCE_BYTES:
        raise UnsealFailed(f"{SEALED_ACL_FILE}: not a sealed ACL document")
    body = sealed[len(_MAGIC) :]
    try:
        return _key(access_key, secret_key).decrypt(
            body[:_NONCE_BYTES], body[_NONCE_BYTES:], access_key.encode()
        )
    except InvalidTag:
        raise UnsealFailed(
            f"{SEALED_ACL_FILE}: not sealed for access key {access_key} "
            f"(the master's access_key must be this broker's)"
        ) from None
