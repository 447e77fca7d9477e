/**
 * Settlement notifications as Standard Webhooks (standardwebhooks.com): one signed POST per
 * settled Run, acknowledged on the Run stream only after the receiver answered 2xx. Delivery is
 * at least once: a receiver may get a notification twice (an answer lost or late, a notifier that
 * died before its acknowledgement) and recognises the copy by its `webhook-id`, the settlement's
 * event id.
 */
import pRetry from 'p-retry';
import { Webhook } from 'standardwebhooks';
import { z } from 'zod';
import { Id, RunSettledV1, type RunEventOf } from '@runplane/contracts';
import type { ConsumerLogger, EventMeta, RunConsumer } from '@runplane/consumer';

/** The body of a notification (Standard Webhooks' `{type, timestamp, data}`); the same bytes on every attempt. */
export const SettlementNotification = z.object({
  type: z.literal('run.settled'),
  /** When the lifecycle settled the Run (the event's `occurredAt`), ISO-8601 UTC. */
  timestamp: z.string().datetime(),
  /** The settlement: its event id (also the `webhook-id` header), the Run, and the settlement's data. */
  data: RunSettledV1.extend({ eventId: z.string().uuid(), runId: Id, conversationId: Id }),
});
export type SettlementNotification = z.infer<typeof SettlementNotification>;

/** The notification of one settlement. */
export function notificationOf(event: RunEventOf<'run.settled'>): SettlementNotification {
  return {
    type: 'run.settled',
    timestamp: event.occurredAt,
    data: { eventId: event.eventId, runId: event.runId, conversationId: event.conversationId, ...event.data },
  };
}

export interface WebhookNotifierOptions {
  /** The receiver's URL. */
  url: string;
  /** The Standard Webhooks secret (`whsec_<base64>`). */
  secret: string;
  /** Most time one POST may take, ms. */
  timeoutMs: number;
  /** Attempts after the first, before the settlement is handed back to the stream (redelivered later). */
  retries: number;
  /** Pauses between attempts: from `minBackoffMs`, doubling, at most `maxBackoffMs`, randomised (x1-2). */
  minBackoffMs: number;
  maxBackoffMs: number;
  logger?: ConsumerLogger;
}

/** A receiver's answer that is not 2xx. */
export class WebhookRejected extends Error {
  constructor(readonly status: number) {
    super(`the receiver answered ${status}`);
    this.name = 'WebhookRejected';
  }
}

/**
 * POSTs settlement notifications. Each attempt is signed anew (`webhook-timestamp` is the
 * attempt's time, seconds; `webhook-signature` is `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`)
 * and bounded by `timeoutMs`; failed attempts (an error, a timeout, a non-2xx answer) are retried
 * with exponential backoff (p-retry); after the last, the handler throws, so the settlement stays
 * unacknowledged and the stream delivers it again.
 */
export class WebhookNotifier {
  private readonly webhook: Webhook;
  private readonly logger: ConsumerLogger;
  /** Aborted by {@link abort}: running attempts end, and their settlements go back to the stream. */
  private readonly stopping = new AbortController();

  /** @throws Error when the secret is not base64. */
  constructor(private readonly opts: WebhookNotifierOptions) {
    this.webhook = new Webhook(opts.secret);
    this.logger = opts.logger ?? console;
  }

  /**
   * Notifies every `run.settled` the consumer delivers that is its Run's first (its other events
   * are acknowledged untouched). A Run has one settlement (K9): one that stands after another on
   * the Run's lifecycle subject (only a forger holding the lifecycle's key and NATS credentials can
   * append it) is logged as an error, acknowledged and not notified, so a receiver never hears a
   * second outcome under a new `webhook-id`; `runplane audit` names it.
   */
  attach(consumer: RunConsumer): void {
    consumer.on('run.settled', async (event, meta) => {
      for await (const earlier of consumer.stream.earlierOnSubject(event, meta.subject)) {
        if (earlier.event.type !== 'run.settled') continue;
        this.logger.error(
          { runId: event.runId, seq: meta.seq, eventId: meta.eventId, firstSettlementSeq: earlier.seq },
          'a second settlement of the Run (K9): not notified; run `runplane audit` over the log',
        );
        return;
      }
      await this.notify(event, meta);
    });
  }

  /**
   * Delivers one settlement: resolves once the receiver answered 2xx.
   * @throws the last attempt's error when every attempt failed, or when {@link abort} was called.
   */
  async notify(event: RunEventOf<'run.settled'>, meta: Pick<EventMeta, 'eventId' | 'deliveryCount'>): Promise<void> {
    const body = JSON.stringify(notificationOf(event));
    await pRetry(() => this.post(meta.eventId, body), {
      retries: this.opts.retries,
      factor: 2,
      minTimeout: this.opts.minBackoffMs,
      maxTimeout: this.opts.maxBackoffMs,
      randomize: true,
      signal: this.stopping.signal,
      onFailedAttempt: ({ error, attemptNumber, retriesLeft }) =>
        this.logger.warn(
          { webhookId: meta.eventId, runId: event.runId, delivery: meta.deliveryCount, attempt: attemptNumber, retriesLeft, reason: error.message },
          'webhook attempt failed',
        ),
    });
  }

  private async post(id: string, body: string): Promise<void> {
    const now = new Date();
    const res = await fetch(this.opts.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
        'webhook-signature': this.webhook.sign(id, now, body),
      },
      body,
      signal: AbortSignal.any([AbortSignal.timeout(this.opts.timeoutMs), this.stopping.signal]),
    });
    // the answer's body is not read: its status is the receiver's word
    await res.body?.cancel().catch(() => undefined);
    if (!res.ok) throw new WebhookRejected(res.status);
  }

  /** Ends the running attempts (their settlements stay unacknowledged, for the next notifier); call before stopping the consumer. */
  abort(): void {
    this.stopping.abort(new Error('the notifier is stopping'));
  }
}
