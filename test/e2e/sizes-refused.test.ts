/**
 * An append the log refuses for good is recorded as a fact, at once (K9, K11), against the real
 * processes on a nats-server whose `max_payload` (128 KiB) is set below what Runplane's own
 * limits allow for a turn (libs/contracts limits.ts): a reply of 200,000 characters, within the
 * turn text limit, cannot be stored as `model.turn.completed`. The runtime never retries it
 * blindly (nor the model request): it records the turn `model.turn.failed` `unrecordable` with the
 * broker's reason, and the lifecycle settles the Run `failed` saying so, long before the
 * no-progress limit (where a dropped record used to leave it, "outcome unknown").
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { startTestStack, testNatsServerBinary, type TestStack } from '../support/stack.js';
import { TestNatsServer } from '../support/nats-server.js';

const MAX_PAYLOAD = 128 * 1024;
const NO_PROGRESS_SECONDS = 300;

let t: TestStack;
let server: TestNatsServer | null = null;
beforeAll(async () => {
  t = await startTestStack(
    'refused',
    {
      RUNPLANE_NO_PROGRESS_SECONDS: String(NO_PROGRESS_SECONDS),
      // output tokens for the 200,000-character reply, in the grant and in one request (the runtime cuts a reply at its reservation, K7)
      RUNPLANE_MAX_OUTPUT_TOKENS: '1000000',
      RUNPLANE_MODEL_MAX_TOKENS: '1000000',
    },
    {
      nats: async (config, auth) =>
        (server = await TestNatsServer.start({ bin: testNatsServerBinary(), config: `${config}\nmax_payload: ${MAX_PAYLOAD}\n`, auth })).url,
    },
  );
}, 120_000);
afterAll(async () => {
  await t?.stop();
  await server?.cleanup();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event) as Extract<RunEvent, { type: T }>[];

describe('an append refused for good (K9, K11)', () => {
  it("a reply over the broker's max_payload is recorded as an unrecordable turn, never retried, and the Run settles failed with that reason at once", async () => {
    const key = 'refused-big-reply';
    await t.setScenario(
      {
        steps: [{ reply: { content: 'y'.repeat(200_000), finishReason: 'stop', usage: { promptTokens: 500, completionTokens: 50 } } }],
        then: 'error',
      },
      key,
    );
    const started = Date.now();
    const posted = await t.client.postMessage('conv-refused', { clientMessageId: key, content: `[${key}] Describe SPY at length` });
    expect(posted.status).toBe(201);
    const events = await t.waitForSettlement(posted.body.runId, 120_000);
    const elapsedMs = Date.now() - started;

    expect(ofType(events, 'model.turn.completed')).toHaveLength(0);
    const [failed] = ofType(events, 'model.turn.failed');
    expect(failed?.data).toMatchObject({ turn: 1, error: { kind: 'unrecordable', status: null } });
    expect(failed!.data.error.message).toMatch(/could not be recorded: .*over the broker's max_payload of 131072/);
    expect(ofType(events, 'model.turn.requested')).toHaveLength(1); // never retried
    expect(ofType(events, 'run.execution.finished')[0]!.data.reason).toBe('model-error');
    const settled = ofType(events, 'run.settled')[0]!.data;
    expect(settled.outcome).toBe('failed');
    expect(settled.reason).toContain('could not be recorded');
    expect(ofType(events, 'run.fenced').every((f) => f.data.reason === 'settling')).toBe(true);
    expect(elapsedMs).toBeLessThan((NO_PROGRESS_SECONDS * 1000) / 3);
  });
});
