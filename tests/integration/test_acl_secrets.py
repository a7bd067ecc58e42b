"""Where the ACL's secret keys go, across real processes: never into an answer an
account can read, never into a file other users can read.

The brokers sign their own calls (a replica copying its master's metadata) with
the ADMIN account here; OPS is another admin account, the kind an operator or a
stolen CLI credential has.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.kernel.signing import Credentials
from boltmq.v1 import broker_pb2
from services.broker.access.acl_seal import SEALED_ACL_FILE, unseal
from tests.integration.test_acl import ADMIN, ORDERS, SECRETS, AclCluster, send

OPS = Credentials("ops-admin", "ops-admin-secret-1")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(
        tmp_path,
        broker_settings=(f"access_key={ADMIN.access_key}", f"secret_key={ADMIN.secret_key}"),
    )
    started.stub(ADMIN).UpdateAcl(
        broker_pb2.UpdateAclRequest(
            upsert_account_json=json.dumps(
                {"accessKey": OPS.access_key, "secretKey": OPS.secret_key, "admin": True}
            )
        ),
        timeout=5,
    )
    yield started
    started.stop()


def holds_a_secret(data: bytes) -> bool:
    return any(s.encode() in data for s in [*SECRETS, OPS.secret_key])


def test_no_admin_answer_carries_a_secret_key(cluster: AclCluster) -> None:
    ops = cluster.stub(OPS)
    metadata = ops.GetMetadata(broker_pb2.GetMetadataRequest(), timeout=5).documents
    assert "topics.json" in metadata
    assert "plain_acl.json" not in metadata and SEALED_ACL_FILE not in metadata
    assert not any(holds_a_secret(data) for data in metadata.values())
    shown = ops.GetAcl(broker_pb2.GetAclRequest(), timeout=5)
    assert ORDERS.access_key in shown.json and not holds_a_secret(shown.json.encode())
    changed = ops.UpdateAcl(broker_pb2.UpdateAclRequest(delete_access_key="reader-app"), timeout=5)
    assert not holds_a_secret(changed.json.encode())

    # The brokers' own account gets the document sealed: no secret in the clear,
    # and only that account's secret opens it.
    documents = cluster.stub(ADMIN).GetMetadata(broker_pb2.GetMetadataRequest(), timeout=5)
    sealed = documents.documents[SEALED_ACL_FILE]
    assert not any(holds_a_secret(data) for data in documents.documents.values())
    opened = json.loads(unseal(sealed, ADMIN.access_key, ADMIN.secret_key))
    assert {a["accessKey"]: a["secretKey"] for a in opened["accounts"]}[
        ORDERS.access_key
    ] == ORDERS.secret_key
    with pytest.raises(ValueError, match="not sealed for access key ops-admin"):
        unseal(sealed, OPS.access_key, OPS.secret_key)


def test_the_acl_file_and_its_backup_are_readable_by_the_store_user_only(
    cluster: AclCluster, tmp_path: Path
) -> None:
    rotated = Credentials(ORDERS.access_key, "orders-secret-2")
    cluster.stub(ADMIN).UpdateAcl(
        broker_pb2.UpdateAclRequest(
            upsert_account_json=json.dumps(
                {
                    "accessKey": rotated.access_key,
                    "secretKey": rotated.secret_key,
                    "topicPerms": {"orders": "PUB|SUB"},
                }
            )
        ),
        timeout=5,
    )
    assert send(cluster.stub(rotated), "orders").statuses == [broker_pb2.SEND_OK]
    config = tmp_path / "store" / "config"
    current, backup = config / "plain_acl.json", config / "plain_acl.json.bak"
    assert rotated.secret_key.encode() in current.read_bytes()
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
    for path in config.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert backup.exists() and stat.S_IMODE(backup.stat().st_mode) == 0o600
