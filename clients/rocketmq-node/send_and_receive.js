// The official RocketMQ 5 Node.js client, unmodified, against a BoltMQ broker: send messages,
// then receive and ack them with a SimpleConsumer. Prints one JSON line per event.
//
//   node send_and_receive.js BROKER_ADDRESS TOPIC GROUP COUNT
//
// BROKER_ADDRESS is a broker's gRPC address (it serves apache.rocketmq.v2.MessagingService);
// see docs/rocketmq-clients.md.
'use strict';

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function emit(fields) {
  process.stdout.write(JSON.stringify(fields) + '\n');
}

async function main() {
  const [endpoints, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const producer = new Producer({ endpoints, namespace: '', topics: [topic] });
  await producer.startup();
  try {
    for (let i = 0; i < count; i++) {
      const receipt = await producer.send({
        topic,
        tag: 'node',
        keys: [`key-${i}`],
        properties: new Map([['origin', 'rmq-node']]),
        body: Buffer.from(`node-${i}`),
      });
      emit({ event: 'sent', message_id: receipt.messageId });
    }
  } finally {
    await producer.shutdown();
  }

  const consumer = new SimpleConsumer({
    endpoints,
    namespace: '',
    consumerGroup: group,
    subscriptions: new Map([[topic, '*']]),
    awaitDuration: 2000,
  });
  await consumer.startup();
  try {
    let received = 0;
    const deadline = Date.now() + 30000;
    while (received < count && Date.now() < deadline) {
      const messages = await consumer.receive(8, 10000);
      for (const message of messages) {
        emit({
          event: 'received',
          message_id: message.messageId,
          body: message.body.toString('utf-8'),
          tag: message.tag,
          attempt: message.deliveryAttempt,
          properties: Object.fromEntries(message.properties),
        });
        await consumer.ack(message);
        received++;
      }
    }
    emit({ event: 'done', received });
  } finally {
    await consumer.shutdown();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    emit({ event: 'error', type: err && err.name, message: String(err && err.message) });
    process.exit(1);
  },
);
