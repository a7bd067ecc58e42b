"""format("boltmq") through a real registry, store and broker: reads, streams, writes."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import pytest

from boltmq.message import Message
from boltmq.producer import Producer
from tests.integration.conftest import Cluster


def send(producer: Producer, topic: str, count: int, start: int = 0) -> list:
    """``count`` messages spread over the topic's queues, one batch per 10."""
    results = []
    for low in range(start, start + count, 10):
        batch = [
            Message(
                topic=topic,
                body=f"{topic}-{i}".encode(),
                tags=f"t{i % 2}",
                keys=[f"k{i}"],
                properties={"seq": str(i)},
            )
            for i in range(low, min(low + 10, start + count))
        ]
        results += producer.send_batch(batch)
    return results


def reader(spark, cluster: Cluster, topic: str, **options: str):  # type: ignore[no-untyped-def]
    builder = (
        spark.read.format("boltmq")
        .option("registry", cluster.registry.address)
        .option("topics", topic)
    )
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder.load()


def bodies(frame) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(r.body.decode() for r in frame.select("body").collect())


def test_batch_read_everything_then_exact_ranges(spark, cluster, producer) -> None:
    results = send(producer, "SparkBatch", 60)
    frame = reader(spark, cluster, "SparkBatch")
    rows = frame.collect()
    assert sorted(r.body.decode() for r in rows) == sorted(f"SparkBatch-{i}" for i in range(60))
    by_id = {r.msg_id: r for r in rows}
    for result in results:
        row = by_id[result.msg_id]
        assert (row.broker_name, row.queue_id, row.queue_offset, row.commitlog_offset) == (
            result.queue.broker_name,
            result.queue.queue_id,
            result.queue_offset,
            result.commitlog_offset,
        )
    first = min(rows, key=lambda r: r.commitlog_offset)
    assert first.tags in ("t0", "t1") and first.keys[0].startswith("k")
    assert first.properties["seq"] == first.body.decode().rsplit("-", 1)[1]

    queue = results[0].queue
    key = f"{queue.broker_name}/{queue.queue_id}"
    in_queue = sorted(
        (r for r in rows if r.queue_id == queue.queue_id), key=lambda r: r.queue_offset
    )
    assert len(in_queue) >= 5
    ranged = reader(
        spark,
        cluster,
        "SparkBatch",
        startingOffsets=json.dumps({"SparkBatch": {key: 2}}),
        endingOffsets=json.dumps({"SparkBatch": {key: 5}}),
    )
    got = [(r.queue_id, r.queue_offset) for r in ranged.collect() if r.queue_id == queue.queue_id]
    assert sorted(got) == [(queue.queue_id, 2), (queue.queue_id, 3), (queue.queue_id, 4)]


def test_split_partitions_and_subscription_and_no_body(spark, cluster, producer) -> None:
    send(producer, "SparkSplit", 80)
    frame = reader(spark, cluster, "SparkSplit", maxOffsetsPerPartition="7")
    assert frame.rdd.getNumPartitions() > 4
    assert bodies(frame) == sorted(f"SparkSplit-{i}" for i in range(80))
    tagged = reader(spark, cluster, "SparkSplit", subscription="t1", includeBody="false")
    rows = tagged.collect()
    assert len(rows) == 40 and all(r.tags == "t1" and r.body is None for r in rows)


def test_starting_timestamp(spark, cluster, producer) -> None:
    send(producer, "SparkTime", 40)
    rows = reader(spark, cluster, "SparkTime").collect()
    times = sorted({int(r.store_timestamp.replace(tzinfo=UTC).timestamp() * 1000) for r in rows})
    assert len(times) >= 2, "messages should carry more than one store time"
    cut = times[len(times) // 2]
    later = reader(spark, cluster, "SparkTime", startingTimestamp=str(cut)).collect()
    expected = sorted(
        r.msg_id
        for r in rows
        if int(r.store_timestamp.replace(tzinfo=UTC).timestamp() * 1000) >= cut
    )
    assert sorted(r.msg_id for r in later) == expected


def test_write_then_read_back_equal(spark, cluster) -> None:
    data = [(f"w{i}".encode(), f"tag{i % 3}", [f"key{i}"], {"n": str(i)}) for i in range(50)]
    frame = spark.createDataFrame(
        data, "body binary, tags string, keys array<string>, properties map<string,string>"
    )
    frame.write.format("boltmq").option("registry", cluster.registry.address).option(
        "topic", "SparkWritten"
    ).mode("append").save()
    back = reader(spark, cluster, "SparkWritten").collect()
    properties = [dict(r.properties) for r in back]
    # the sink gave every row its own unique id, as a producer's send
    unique_ids = {p.pop("UNIQ_KEY") for p in properties}
    assert len(unique_ids) == len(back) and all(len(i) == 32 for i in unique_ids)
    rows = zip(back, properties, strict=True)
    got = sorted((bytes(r.body), r.tags, list(r.keys), p) for r, p in rows)
    assert got == sorted(data)


def test_write_with_topic_column_and_sharding_key(spark, cluster) -> None:
    rows = [
        ("SparkShardA" if i % 2 else "SparkShardB", f"s{i}", f"user{i % 3}") for i in range(300)
    ]
    frame = spark.createDataFrame(rows, "topic string, body string, sharding_key string")
    # Small batches, several in flight: a key's batches must still arrive in order.
    frame.coalesce(1).write.format("boltmq").option("registry", cluster.registry.address).option(
        "batchSize", "4"
    ).option("maxInFlight", "4").mode("append").save()
    for topic in ("SparkShardA", "SparkShardB"):
        back = reader(spark, cluster, topic).collect()
        assert sorted(r.body.decode() for r in back) == sorted(
            body for t, body, _ in rows if t == topic
        )
        queues: dict[str, set[int]] = {}
        for r in back:
            index = int(r.body.decode()[1:])
            queues.setdefault(f"user{index % 3}", set()).add(r.queue_id)
        assert all(len(q) == 1 for q in queues.values())  # one key, one queue
        for key in queues:
            sent = [
                int(r.body.decode()[1:])
                for r in sorted(back, key=lambda r: r.queue_offset)
                if f"user{int(r.body.decode()[1:]) % 3}" == key
            ]
            assert sent == sorted(sent)  # in the order the rows were written
    writer = frame.write.format("boltmq").option("registry", cluster.registry.address)
    with pytest.raises(Exception, match="batchSize=16385: at most 16384"):
        writer.option("batchSize", "16385").mode("append").save()
    with pytest.raises(Exception, match="maxInFlight='0': expected a positive integer"):
        writer.option("batchSize", "10").option("maxInFlight", "0").mode("append").save()


def test_write_save_mode_mistakes_are_explained(spark, cluster) -> None:
    frame = spark.createDataFrame([("x",)], "body string")
    writer = (
        frame.write.format("boltmq")
        .option("registry", cluster.registry.address)
        .option("topic", "SparkModes")
    )
    with pytest.raises(Exception, match="ErrorIfExists"):
        writer.save()
    with pytest.raises(Exception, match="only appends"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="needs a body column"):
        spark.createDataFrame([("x",)], "value string").write.format("boltmq").option(
            "registry", cluster.registry.address
        ).option("topic", "T").mode("append").save()
    with pytest.raises(Exception, match="body is null"):
        spark.createDataFrame([(None,)], "body string").write.format("boltmq").option(
            "registry", cluster.registry.address
        ).option("topic", "SparkModes").mode("append").save()


def test_bad_options_fail_clearly(spark, cluster, producer) -> None:
    send(producer, "SparkOpts", 4)
    with pytest.raises(Exception, match="topic 'NoSuchTopic' does not exist"):
        reader(spark, cluster, "NoSuchTopic").collect()
    with pytest.raises(Exception, match="startingOffsets is not valid JSON"):
        reader(spark, cluster, "SparkOpts", startingOffsets="{SparkOpts: 3}").collect()
    with pytest.raises(Exception, match="expected brokerName/queueId"):
        reader(spark, cluster, "SparkOpts", startingOffsets='{"SparkOpts": {"zero": 1}}').collect()
    with pytest.raises(Exception, match="which does not exist"):
        reader(
            spark, cluster, "SparkOpts", startingOffsets='{"SparkOpts": {"broker-z/0": 1}}'
        ).collect()
    with pytest.raises(Exception, match="option registry is required"):
        spark.read.format("boltmq").option("topics", "SparkOpts").load().collect()
    with pytest.raises(Exception, match="cannot be reached"):
        spark.read.format("boltmq").option("registry", "127.0.0.1:1").option(
            "topics", "SparkOpts"
        ).option("rpcTimeoutMs", "1000").load().collect()
    with pytest.raises(Exception, match="exactly one of the options topics"):
        spark.read.format("boltmq").option("registry", cluster.registry.address).load().collect()


def stream_to_memory(spark, cluster, topic: str, checkpoint: Path, name: str, **options: str):  # type: ignore[no-untyped-def]
    """Run one availableNow query; the rows it read and its non-empty micro-batch sizes."""
    builder = (
        spark.readStream.format("boltmq")
        .option("registry", cluster.registry.address)
        .option("topicPattern", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        builder = builder.option(key, value)
    rows: list = []
    sizes: list[int] = []

    def collect(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        got = batch.collect()
        rows.extend(got)
        if got:
            sizes.append(len(got))

    query = (
        builder.load()
        .select("topic", "msg_id", "queue_id", "queue_offset", "body")
        .writeStream.foreachBatch(collect)
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return rows, sizes


def test_stream_available_now_with_admission_control_and_restart(
    spark, cluster, producer, tmp_path
) -> None:
    send(producer, "SparkStream", 45)
    checkpoint = tmp_path / "checkpoint"
    rows, batches = stream_to_memory(
        spark, cluster, "SparkStream", checkpoint, "first", maxOffsetsPerTrigger="10"
    )
    assert sorted(r.body.decode() for r in rows) == sorted(f"SparkStream-{i}" for i in range(45))
    assert len(batches) >= 5 and all(size <= 10 for size in batches)

    send(producer, "SparkStream", 25, start=45)
    send(producer, "SparkStreamNew", 5)  # a new topic the pattern does not match
    again, batches = stream_to_memory(
        spark, cluster, "SparkStream", checkpoint, "second", maxOffsetsPerTrigger="10"
    )
    assert sorted(r.body.decode() for r in again) == sorted(
        f"SparkStream-{i}" for i in range(45, 70)
    )  # each message exactly once
    assert len(batches) >= 3


def test_stream_picks_up_new_topics(spark, cluster, producer, tmp_path) -> None:
    send(producer, "SparkPatA", 6)
    checkpoint = tmp_path / "checkpoint"
    rows, _ = stream_to_memory(spark, cluster, "SparkPat.*", checkpoint, "pat1")
    assert len(rows) == 6
    send(producer, "SparkPatB", 4)
    send(producer, "SparkPatA", 2, start=6)
    rows, _ = stream_to_memory(spark, cluster, "SparkPat.*", checkpoint, "pat2")
    assert sorted(r.body.decode() for r in rows) == sorted(
        ["SparkPatA-6", "SparkPatA-7"] + [f"SparkPatB-{i}" for i in range(4)]
    )


def test_streaming_write_refuses_complete_and_update_output_modes(
    spark, cluster, producer, tmp_path
) -> None:
    send(producer, "SparkModesIn", 4)
    source = (
        spark.readStream.format("boltmq")
        .option("registry", cluster.registry.address)
        .option("topics", "SparkModesIn")
        .option("startingOffsets", "earliest")
        .load()
    )
    counts = source.groupBy("tags").count().selectExpr("cast(count as string) as body")
    for mode, message in (
        ("complete", "only appends: use outputMode\\('append'\\)"),
        ("update", "does not support Update mode"),
    ):
        # availableNow: were the mode accepted, the query would end, and not raise
        query = (
            counts.writeStream.format("boltmq")
            .option("registry", cluster.registry.address)
            .option("topic", "SparkModesOut")
            .outputMode(mode)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / mode))
            .start()
        )
        with pytest.raises(Exception, match=message):
            query.awaitTermination()


def test_compressed_bodies_come_back_whole(spark, cluster, producer) -> None:
    """Bodies over the producer's threshold are stored zlib-compressed; the source
    gives the originals, mixed with short ones stored as they are."""
    long = [(f"long-{i} " * 20_000).encode()[: 100 * 1024] for i in range(6)]
    short = [f"short-{i}".encode() for i in range(30)]
    sent = [*long, *short]
    results = producer.send_batch([Message(topic="SparkZipped", body=b) for b in sent])
    assert len(results) == len(sent)
    rows = reader(spark, cluster, "SparkZipped").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(sent)
