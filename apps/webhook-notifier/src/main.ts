#!/usr/bin/env node
/**
 * The webhook notifier (docs/consumers.md): follows the lifecycle's subjects of the Run stream
 * with a durable downstream consumer and POSTs every settlement, signed. Logs are JSON lines on
 * stderr; stdout carries only `webhook-notifier ready on <consumer name>`. SIGTERM or SIGINT
 * stops it: running attempts are ended, their settlements go back to the stream for the next start.
 */
import pino from 'pino';
import { RunConsumer, runStreamOptionsFromEnv } from '@runplane/consumer';
import { loadConfig } from '@runplane/contracts';
import { NotifierConfig } from './config.js';
import { WebhookNotifier } from './notifier.js';

const logger = pino({ base: { service: 'webhook-notifier', pid: process.pid } }, pino.destination({ dest: 2, sync: true }));

try {
  // a bad setting fails here in one readable line (`Invalid configuration: WEBHOOK_SECRET: ...`)
  const config = loadConfig(NotifierConfig);
  const consumer = await RunConsumer.connect({
    ...runStreamOptionsFromEnv(process.env),
    connectionName: 'webhook-notifier',
    name: config.WEBHOOK_CONSUMER_NAME,
    owners: ['lifecycle'],
    ackWaitMs: config.WEBHOOK_ACK_WAIT_MS,
    onInvalid: (m) =>
      logger.error({ seq: m.seq, subject: m.subject, anomaly: m.anomaly, reason: m.reason }, 'not a fact of the log: terminated, not notified'),
    logger,
  });
  const notifier = new WebhookNotifier({
    url: config.WEBHOOK_URL,
    secret: config.WEBHOOK_SECRET,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    retries: config.WEBHOOK_RETRIES,
    minBackoffMs: config.WEBHOOK_MIN_BACKOFF_MS,
    maxBackoffMs: config.WEBHOOK_MAX_BACKOFF_MS,
    logger,
  });
  notifier.attach(consumer);
  await consumer.start();
  process.stdout.write(`webhook-notifier ready on ${consumer.name}\n`);
  const stop = () => {
    notifier.abort();
    void consumer.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} catch (e) {
  logger.fatal({ err: e }, 'webhook-notifier cannot start');
  process.stderr.write(`webhook-notifier cannot start: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
}
