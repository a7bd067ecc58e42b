// Send one message through a BoltMQ broker and pull it back, using nothing but
// the .proto files in protos/ (loaded at run time by @grpc/proto-loader).
//
//   node send_and_pull.js REGISTRY_ADDRESS TOPIC BODY
//
// Prints one JSON line: {"msgId", "queueId", "queueOffset", "body", "tags"}.
// Exits 1 with a one-line message on any failure.
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTOS = path.resolve(__dirname, '..', '..', 'protos');
const DEADLINE_MS = 10000;

function load() {
  const definition = protoLoader.loadSync(
    ['boltmq/v1/broker.proto', 'boltmq/v1/registry.proto'],
    { includeDirs: [PROTOS], keepCase: true, longs: String, enums: String, defaults: true },
  );
  return grpc.loadPackageDefinition(definition).boltmq.v1;
}

function call(client, method, request) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + DEADLINE_MS);
    client[method](request, { deadline }, (error, response) => {
      if (error) reject(new Error(`${method}: ${error.details || error.message}`));
      else resolve(response);
    });
  });
}

async function main() {
  const [registryAddress, topic, body] = process.argv.slice(2);
  if (!registryAddress || !topic || body === undefined) {
    throw new Error('usage: node send_and_pull.js REGISTRY_ADDRESS TOPIC BODY');
  }
  const v1 = load();
  const credentials = grpc.credentials.createInsecure();
  const registry = new v1.RegistryService(registryAddress, credentials);
  const cluster = await call(registry, 'GetClusterInfo', {});
  const master = cluster.brokers.find((b) => String(b.broker_id) === '0');
  if (!master) throw new Error('no live master broker is registered');
  const broker = new v1.BrokerService(master.address, credentials);

  const sent = await call(broker, 'SendMessage', {
    producer_group: 'NODE_PRODUCER',
    messages: [{ topic, queue_id: 0, body: Buffer.from(body), tags: 'node', keys: ['node-1'] }],
  });
  // Results are packed arrays, one entry per message sent.
  if (sent.statuses[0] !== 'SEND_OK') {
    throw new Error(`send failed: ${sent.statuses[0]} ${sent.put_statuses[0]} `
      + `${sent.errors[0] || ''}`);
  }
  const offsetHex = BigInt(sent.commitlog_offsets[0]).toString(16).toUpperCase();
  const sentMsgId = sent.msg_id_prefix + offsetHex.padStart(16, '0');
  const pulled = await call(broker, 'PullMessage', {
    consumer_group: 'NODE_CONSUMER', topic, queue_id: sent.queue_id,
    queue_offset: sent.queue_offsets[0], max_messages: 1, subscription: '*',
    suspend_timeout_ms: 0, raw_records: false,
  });
  if (pulled.status !== 'FOUND' || pulled.messages.length === 0) {
    throw new Error(`pull found nothing: ${pulled.status}`);
  }
  const message = pulled.messages[0];
  console.log(JSON.stringify({
    msgId: message.msg_id,
    sentMsgId,
    queueId: message.queue_id,
    queueOffset: message.queue_offset,
    body: message.body.toString(),
    tags: message.tags,
  }));
}

main().then(() => process.exit(0), (error) => {
  console.error(`error: ${error.message}`);
  process.exit(1);
});
