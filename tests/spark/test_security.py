"""format("boltmq") against a mutual-TLS cluster and an ACL cluster (real processes).

The TLS cluster is ``boltmq dev --tls``'s set-up (boltmq.cli.dev.certificates on
every process, client certificates required); the ACL cluster is
tests/integration/test_acl.py's (``acl_enable`` with its seed file). Option
mistakes are checked both by the parser and through a Spark query.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel.signing import Credentials
from boltmq.spark.errors import OptionError
from boltmq.spark.options import sink_options, source_options
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.test_acl import ORDERS, READER, AclCluster

ACL_TOPIC = "orders"
"""The topic test_acl's seed grants: ORDERS may PUB|SUB, READER may SUB."""


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return dev_certificates.generate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_cluster(
    tmp_path_factory: pytest.TempPathFactory, certificates: DevCertificates
) -> Iterator[LocalCluster]:
    """Registry, store and broker, each serving mutual TLS only."""
    spec = ClusterSpec(
        tmp_path_factory.mktemp("tls-cluster"),
        store_settings=CLUSTER_STORE_SETTINGS,
        broker_settings=CLUSTER_BROKER_SETTINGS,
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
        certificates=certificates,
    )
    cluster = LocalCluster(spec).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    cluster = AclCluster(tmp_path_factory.mktemp("acl-cluster"))
    yield cluster
    cluster.stop()


def tls_options(certificates: DevCertificates, *, certificate: bool = True) -> dict[str, str]:
    options = {"tls.caFile": str(certificates.ca_file)}
    if certificate:
        options |= {
            "tls.certFile": str(certificates.client_cert_file),
            "tls.keyFile": str(certificates.client_key_file),
        }
    return options


def signing(credentials: Credentials) -> dict[str, str]:
    return {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}


def read(spark, registry: str, topic: str, **options: str):  # type: ignore[no-untyped-def]
    return (
        spark.read.format("boltmq")
        .option("registry", registry)
        .option("topics", topic)
        .options(**options)
        .load()
    )


def write(
    spark,
    registry: str,
    topic: str,
    bodies: list[str],  # type: ignore[no-untyped-def]
    **options: str,
) -> None:
    spark.createDataFrame([(b,) for b in bodies], "body string").write.format("boltmq").option(
        "registry", registry
    ).option("topic", topic).options(**options).mode("append").save()


def stream_bodies(
    spark,
    registry: str,
    topic: str,
    checkpoint: Path,  # type: ignore[no-untyped-def]
    **options: str,
) -> tuple[list[str], object]:
    """Every body an availableNow streaming read of ``topic`` sees, and the ended query."""
    got: list[str] = []
    query = (
        spark.readStream.format("boltmq")
        .option("registry", registry)
        .option("topics", topic)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .writeStream.foreachBatch(
            lambda batch, _id: got.extend(r.body.decode() for r in batch.collect())
        )
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return got, query


# ------------------------------------------------------------------ option mistakes
@pytest.mark.parametrize(
    "given, message",
    [
        ({"tls.certFile": "{cert}"}, "option tls.certFile needs tls.keyFile"),
        ({"tls.caFile": "{ca}", "tls.keyFile": "{key}"}, "option tls.keyFile needs tls.certFile"),
        (
            {"tls.certFile": "{cert}", "tls.keyFile": "{key}"},
            "options tls.certFile and tls.keyFile need tls.caFile",
        ),
        ({"tls.caFile": "{missing}"}, "option tls.caFile: cannot read {missing}"),
        ({"tls.caFile": "{key}"}, "option tls.caFile: {key} holds no PEM certificate"),
        (
            {"tls.caFile": "{ca}", "tls.certFile": "{cert}", "tls.keyFile": "{cert}"},
            "option tls.keyFile: {cert} holds no PEM private key",
        ),
        (
            {"accessKey": "orders-app"},
            "accessKey and secretKey are given together (.*); secretKey is missing",
        ),
        ({"secretKey": "s3cret-value"}, "accessKey is missing"),
        ({"accessKey": "ab", "secretKey": "s3cret-value"}, "access key must be 6-128"),
        ({"accessKey": "orders-app", "secretKey": "tiny"}, "secret key must be 6-256"),
    ],
)
def test_security_option_mistakes_are_named(
    certificates: DevCertificates, tmp_path: Path, given: dict[str, str], message: str
) -> None:
    names = {
        "ca": str(certificates.ca_file),
        "cert": str(certificates.client_cert_file),
        "key": str(certificates.client_key_file),
        "missing": str(tmp_path / "none.pem"),
    }
    options = {
        "registry": "127.0.0.1:9876",
        "topics": "T",
        **{k: v.format(**names) for k, v in given.items()},
    }
    expected = message.format(**{k: re.escape(v) for k, v in names.items()})
    with pytest.raises(OptionError, match=expected) as read_error:
        source_options(options, streaming=False)
    with pytest.raises(OptionError, match=expected):
        sink_options(options, ["topic", "body"])
    for secret in ("s3cret-value", "tiny"):
        assert secret not in str(read_error.value)


def test_a_query_with_a_lone_certificate_or_access_key_fails_before_it_runs(
    spark, certificates: DevCertificates
) -> None:
    with pytest.raises(Exception, match="option tls.certFile needs tls.keyFile"):
        read(
            spark,
            "127.0.0.1:9876",
            "T",
            **{
                "tls.caFile": str(certificates.ca_file),
                "tls.certFile": str(certificates.client_cert_file),
            },
        ).collect()
    with pytest.raises(Exception, match="secretKey is missing"):
        write(spark, "127.0.0.1:9876", "T", ["x"], accessKey="orders-app")


def test_options_and_their_reprs_never_show_the_secret_or_the_private_key(
    certificates: DevCertificates,
) -> None:
    options = source_options(
        {
            "registry": "127.0.0.1:9876",
            "topics": "T",
            **tls_options(certificates),
            **signing(ORDERS),
        },
        streaming=False,
    )
    private_key = certificates.client_key_file.read_bytes()
    assert options.security.credentials == ORDERS
    assert options.security.tls is not None and options.security.tls.private_key == private_key
    text = repr(options)
    assert ORDERS.access_key in text and str(certificates.ca_file) in text
    assert ORDERS.secret_key not in text and "PRIVATE KEY" not in text
    assert pickle.loads(pickle.dumps(options)) == options  # what a task receives


# ------------------------------------------------------------------ mutual TLS
def test_write_and_read_back_over_mutual_tls(
    spark, tls_cluster: LocalCluster, certificates: DevCertificates, tmp_path: Path
) -> None:
    assert tls_cluster.registry is not None
    registry = tls_cluster.registry.address
    tls = tls_options(certificates)
    sent = [f"tls-{i}" for i in range(40)]
    write(spark, registry, "SparkTls", sent, **tls)
    assert sorted(
        r.body.decode() for r in read(spark, registry, "SparkTls", **tls).collect()
    ) == sorted(sent)
    # Streaming: read SparkTls and write it on to SparkTlsCopy, both over TLS.
    query = (
        spark.readStream.format("boltmq")
        .option("registry", registry)
        .option("topics", "SparkTls")
        .option("startingOffsets", "earliest")
        .options(**tls)
        .load()
        .select("body")
        .writeStream.format("boltmq")
        .option("registry", registry)
        .option("topic", "SparkTlsCopy")
        .options(**tls)
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    copied, _query = stream_bodies(spark, registry, "SparkTlsCopy", tmp_path / "check", **tls)
    assert sorted(copied) == sorted(sent)


def test_a_tls_cluster_refuses_plaintext_and_certificate_less_queries(
    spark, tls_cluster: LocalCluster, certificates: DevCertificates
) -> None:
    assert tls_cluster.registry is not None
    registry = tls_cluster.registry.address
    write(spark, registry, "SparkTlsRefused", ["x"], **tls_options(certificates))
    unreachable = f"registry {re.escape(registry)} cannot be reached: .*"
    with pytest.raises(
        Exception,
        match=unreachable + "calls were plaintext: if the cluster serves TLS, set tls.caFile",
    ):
        read(spark, registry, "SparkTlsRefused", rpcTimeoutMs="2000").collect()
    with pytest.raises(
        Exception,
        match=unreachable + "without a client certificate: .* set tls.certFile and tls.keyFile",
    ):
        read(
            spark,
            registry,
            "SparkTlsRefused",
            rpcTimeoutMs="2000",
            **tls_options(certificates, certificate=False),
        ).collect()
    other_ca = dev_certificates.generate(certificates.ca_file.parent / "other")
    with pytest.raises(Exception, match=unreachable + "check that tls.caFile is the CA"):
        read(
            spark, registry, "SparkTlsRefused", rpcTimeoutMs="2000", **tls_options(other_ca)
        ).collect()
    with pytest.raises(
        Exception,
        match="WriteError: sending 1 messages to 'SparkTlsRefused' failed: .*calls were plaintext",
    ):
        write(spark, registry, "SparkTlsRefused", ["y"], sendTimeoutMs="2000")


# ------------------------------------------------------------------ ACL
def test_write_and_read_back_with_signed_calls(
    spark, acl_cluster: AclCluster, tmp_path: Path
) -> None:
    registry = acl_cluster.registry.address
    sent = [f"acl-{i}" for i in range(30)]
    write(spark, registry, ACL_TOPIC, sent, **signing(ORDERS))
    frame = read(spark, registry, ACL_TOPIC, **signing(READER))
    assert sorted(r.body.decode() for r in frame.collect()) == sorted(sent)
    streamed, query = stream_bodies(
        spark, registry, ACL_TOPIC, tmp_path / "stream", **signing(READER)
    )
    assert sorted(streamed) == sorted(sent)
    # What Spark shows of the queries (plans, progress) never holds the secret.
    shown = [
        frame._jdf.queryExecution().toString(),
        query._jsq.explainInternal(True),
        "\n".join(progress.json for progress in query.recentProgress),
    ]
    assert "boltmq" in shown[0] and ACL_TOPIC in shown[2]
    assert not any(READER.secret_key in text for text in shown)


def test_wrong_or_missing_credentials_fail_the_query_without_showing_the_secret(
    spark, acl_cluster: AclCluster
) -> None:
    registry = acl_cluster.registry.address
    wrong = {"accessKey": ORDERS.access_key, "secretKey": "not-the-secret-1"}
    errors = []
    for options, message in (
        (wrong, "TopicStatus failed: UNAUTHENTICATED"),
        ({}, "TopicStatus failed: UNAUTHENTICATED"),
    ):
        with pytest.raises(Exception, match=message) as failed:
            read(spark, registry, ACL_TOPIC, **options).collect()
        errors.append(str(failed.value))
    for options, message in (
        (wrong, "sending 1 messages to 'orders' failed: .*UNAUTHENTICATED"),
        (signing(READER), "sending 1 messages to 'orders' failed: .*PERMISSION_DENIED"),
    ):
        with pytest.raises(Exception, match=message) as failed:
            write(spark, registry, ACL_TOPIC, ["refused"], **options)
        errors.append(str(failed.value))
    assert not any(
        secret in error for error in errors for secret in ("not-the-secret-1", READER.secret_key)
    )
