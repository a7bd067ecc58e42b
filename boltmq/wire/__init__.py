"""Pure codecs shared by the SDK and every service: the CommitLog record, record
batches, the bulk (numpy) checks paired with the scalar functions they must equal,
the pull answer's encoding and the topic and group name rules.

This package imports nothing of BoltMQ's but the generated stubs (``boltmq.v1``).
"""
