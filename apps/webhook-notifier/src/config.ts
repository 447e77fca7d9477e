/**
 * The notifier's configuration from the environment (besides the bus: `NATS_URL`, `NATS_USER`,
 * `NATS_PASSWORD`, `NATS_CA_FILE`, `RUNPLANE_STREAM`, `RUNPLANE_SUBJECT_PREFIX`, read by @runplane/consumer).
 */
import { z } from 'zod';
import { envInt } from '@runplane/contracts';
import { downstreamConsumerName } from '@runplane/consumer';

/** A Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 random bytes. */
export const WebhookSecret = z
  .string()
  .regex(/^whsec_[A-Za-z0-9+/]+={0,2}$/, 'must be whsec_ followed by base64')
  .refine((s) => {
    const n = Buffer.from(s.slice('whsec_'.length), 'base64').length;
    return n >= 24 && n <= 64;
  }, 'must hold 24 to 64 bytes');

export const NotifierConfig = z.object({
  /** Where every settlement is POSTed. */
  WEBHOOK_URL: z.url({ protocol: /^https?$/ }),
  /** The signing secret shared with the receiver ({@link WebhookSecret}). */
  WEBHOOK_SECRET: WebhookSecret,
  /** The durable consumer's name (`downstream-...`, connect as that durable's own NATS user, the only one the broker lets use it): the same name resumes where it stopped. */
  WEBHOOK_CONSUMER_NAME: z.string().transform((name, ctx) => {
    try {
      return downstreamConsumerName(name);
    } catch (e) {
      ctx.addIssue({ code: 'custom', message: (e as Error).message });
      return z.NEVER;
    }
  }),
  /** How long one POST may take before it counts as failed (connection, headers), ms. */
  WEBHOOK_TIMEOUT_MS: envInt(10_000, 100, 300_000),
  /** Attempts after the first within one delivery, before the event is handed back for redelivery. */
  WEBHOOK_RETRIES: envInt(5, 0, 50),
  /** First and largest pause between attempts, ms (doubling, randomised up to twice). */
  WEBHOOK_MIN_BACKOFF_MS: envInt(1_000, 0, 600_000),
  WEBHOOK_MAX_BACKOFF_MS: envInt(30_000, 0, 3_600_000),
  /** How long a delivered settlement may stay unacknowledged while no notifier works on it (a crashed one), ms. */
  WEBHOOK_ACK_WAIT_MS: envInt(30_000, 1_000, 3_600_000),
});
export type NotifierConfig = z.infer<typeof NotifierConfig>;
