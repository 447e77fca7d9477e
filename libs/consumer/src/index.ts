export * from './stream.js';
export * from './run-consumer.js';
export * from './processed.js';
export type { RunEvent, RunEventOf } from '@runplane/contracts';
export {
  DEFAULT_DOWNSTREAM_CONSUMERS,
  DOWNSTREAM_CONSUMER_PREFIX,
  inboxPrefixOf,
  RetryLater,
  type ConsumerLogger,
  type DeliveryInfo,
} from '@runplane/eventlog';
