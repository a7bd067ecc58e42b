"""Run by the official client's venv: print its apache.rocketmq.v2 files' descriptors
(serialized FileDescriptorProto, hex), one JSON object."""

import json

from google.protobuf import descriptor_pb2
from rocketmq.grpc_protocol import admin_pb2, definition_pb2, service_pb2

files = {}
for module in (definition_pb2, service_pb2, admin_pb2):
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    files[module.__name__.rsplit(".", 1)[-1]] = proto.SerializeToString().hex()
print(json.dumps(files))
