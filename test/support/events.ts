/**
 * Small events for tests that append to a stream by hand (libs, CLI, consumers): a Run's context,
 * its admission and its settlement, valid against the catalogue. Times are the call's.
 */
import { makeEvent, type EventContext } from '@runplane/contracts';

/** The envelope context of a test Run (conversation `c1`, message `m1`). */
export const testContext = (runId: string): EventContext => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });

/** A `run.admitted` of a test Run: message `hello`, tool `list_funds`, `maxModelRequests` requests, 2 tool calls, a deadline a minute away. */
export const admittedEvent = (runId: string, maxModelRequests = 2) =>
  makeEvent(
    'run.admitted',
    testContext(runId),
    'admission',
    {
      message: { messageId: 'm1', clientMessageId: 'cm1', content: 'hello', contentSha256: 'a'.repeat(64) },
      grant: { tools: ['list_funds'], model: 'm' },
      limits: { maxModelRequests, maxToolCalls: 2, deadlineAt: new Date(Date.now() + 60_000).toISOString() },
    },
    new Date(),
  );

/** A `run.settled` `completed` of a test Run, with the given measured tokens. */
export const settledEvent = (runId: string, tokens = { promptTokens: 1, completionTokens: 1 }) =>
  makeEvent(
    'run.settled',
    testContext(runId),
    'settle',
    { outcome: 'completed', reason: 'answered', passageIds: [], receipts: [], usage: { modelRequests: 1, toolCalls: 0, ...tokens } },
    new Date(),
  );

/**
 * A `run.settled` `completed` that nobody earned (reason `forged`, nothing used) in `ctx`, at `now`:
 * what tests of the guards against a forgery append or decide.
 */
export const forgedSettlement = (ctx: EventContext, now = new Date()) =>
  makeEvent(
    'run.settled',
    ctx,
    'settlement',
    {
      outcome: 'completed',
      reason: 'forged',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
    },
    now,
  );
