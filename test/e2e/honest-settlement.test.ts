/**
 * Honest settlement (K8, K9) against the real processes, NATS JetStream and PostgreSQL: an answer
 * that lists what it left unanswered settles `partial` with that list (the scripted model's keyed
 * scenario, and the offline research policy on ../shared's files when present); a Run that
 * committed passages and then failed settles `partial`, its passages kept; the answer endpoint's
 * `complete` is true only for a `completed` settlement; a reply without a usage chunk is counted
 * as unknown usage, not 0 tokens. And exactly one settlement per Run when a cancel races the
 * completion while two lifecycle processes consume the same facts.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { RunplaneHttpError } from '@runplane/client';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { itWithSharedData } from '../support/shared-data.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('honest', { RUNPLANE_RECOVERY_SWEEP_MS: '100' });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];

const GAPS = [
  { part: 'holdings of XYZ', reason: 'no holdings file for XYZ in the data' },
  { part: 'top 10 holdings of QQQ', reason: 'only 5 came back' },
];
const BLOCK = `\`\`\`json runplane-unanswered\n${JSON.stringify({ unanswered: GAPS })}\n\`\`\``;

describe('an answer that says what it did not answer settles partial (K9)', () => {
  it('a scripted answer ending with an unanswered block: the block is kept out of the passages, the Run settles partial with the list, complete is false', async () => {
    const key = `gaps-${t.tag}`;
    const content = `SPY and QQQ overlap by half.\n\nNot answered: holdings of XYZ; top 10 holdings of QQQ.\n${BLOCK}`;
    await t.setScenario({ steps: [{ reply: { content } }], then: 'error' }, key);
    const { body } = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] Compare SPY, QQQ and XYZ` });
    const events = await t.waitForSettlement(body.runId, 60_000);
    const published = ofType(events, 'answer.published');
    expect(published).toHaveLength(1);
    expect(published[0]!.event.data.unanswered).toEqual(GAPS);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.event.data).toMatchObject({ outcome: 'partial', unanswered: GAPS });
    const answer = await t.client.getAnswer(body.runId);
    expect(answer).toMatchObject({ complete: false, outcome: 'partial', unanswered: GAPS });
    expect(answer.text).toBe('SPY and QQQ overlap by half.\n\nNot answered: holdings of XYZ; top 10 holdings of QQQ.');
    expect(answer.text).not.toContain('runplane-unanswered');
  });

  it('an answer with an empty list settles completed and the answer endpoint says complete; without a usage chunk its tokens are unknown, not 0', async () => {
    const key = `nogaps-${t.tag}`;
    const content = `Everything was answered.\n\`\`\`json runplane-unanswered\n{"unanswered":[]}\n\`\`\``;
    // the scripted model sends a usage chunk only when asked; rawChunks without one is a reply with no usage
    await t.setScenario({ steps: [{ rawChunks: [{ delta: { role: 'assistant', content } }, { finishReason: 'stop' }] }], then: 'error' }, key);
    const { body } = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does SPY hold?` });
    const events = await t.waitForSettlement(body.runId, 60_000);
    const completedTurn = ofType(events, 'model.turn.completed')[0]!.event.data;
    expect(completedTurn.usage).toBeNull();
    const settled = ofType(events, 'run.settled')[0]!.event.data;
    expect(settled).toMatchObject({ outcome: 'completed', unanswered: [] });
    expect(settled.usage).toMatchObject({ modelRequests: 1, unknownUsageTurns: 1 });
    expect(await t.client.getAnswer(body.runId)).toMatchObject({
      complete: true,
      outcome: 'completed',
      text: 'Everything was answered.',
      unanswered: [],
    });
  });

  itWithSharedData(
    'the research policy on ../shared: three funds, one with no holdings file (VGT: a fact sheet only), settles partial naming it',
    async () => {
      const key = `three-funds-${t.tag}`;
      const { body } = await t.client.postMessage(`conv-${key}`, {
        clientMessageId: key,
        content: `Compare the holdings of SPY, QQQ and VGT (${key})`,
      });
      const events = await t.waitForSettlement(body.runId, 90_000);
      const settled = ofType(events, 'run.settled')[0]!.event.data;
      expect(settled.outcome).toBe('partial');
      expect(settled.unanswered!.length).toBeGreaterThan(0);
      expect(settled.unanswered!.some((u) => u.part.includes('VGT'))).toBe(true);
      expect(ofType(events, 'answer.published')[0]!.event.data.unanswered).toEqual(settled.unanswered);
      const answer = await t.client.getAnswer(body.runId);
      expect(answer.complete).toBe(false);
      expect(answer.text).not.toContain('runplane-unanswered');
    },
    120_000,
  );
});

describe('published text is never erased by a later failure (K9)', () => {
  it('a Run that committed a passage and then failed on the model settles partial, the passage kept and served; the failed turn’s usage is unknown', async () => {
    const key = `fail-after-text-${t.tag}`;
    const preamble = 'SPY is the S&P 500 fund; its file is read next.';
    await t.setScenario(
      {
        steps: [{ reply: { content: `${preamble}\n\n`, toolCalls: [{ name: 'list_funds', arguments: {} }] } }],
        then: 'error',
      },
      key,
    );
    const { body } = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does SPY hold?` });
    const events = await t.waitForSettlement(body.runId, 60_000);
    expect(ofType(events, 'model.turn.failed').length).toBeGreaterThan(0);
    const committed = ofType(events, 'passage.committed');
    expect(committed.map((p) => p.event.data.text)).toEqual([preamble]);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    const s = settled[0]!.event.data;
    expect(s.outcome).toBe('partial');
    expect(s.passageIds).toEqual([committed[0]!.event.data.passageId]);
    expect(s.unanswered).toEqual([{ part: 'the rest of the answer', reason: expect.stringMatching(/model request failed/) }]);
    const failedTurns = ofType(events, 'model.turn.failed').length;
    expect(s.usage.unknownUsageTurns).toBe(failedTurns);
    expect(await t.client.getAnswer(body.runId)).toMatchObject({ complete: false, outcome: 'partial', text: preamble });
  });
});

describe('exactly one settlement per Run when a cancel races the completion, with two lifecycle processes (K9)', () => {
  it('20 Runs, each canceled right around the time its answer is published: one run.settled each, consistent with the log', async () => {
    const second = await t.stack.startService('lifecycle');
    try {
      const runs = await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const key = `race-${i}-${t.tag}`;
          await t.setScenario({ steps: [{ reply: { content: `Answer ${i}.\n\nSecond paragraph ${i}.` }, delayMs: 200 }], then: 'error' }, key);
          const { body } = await t.client.postMessage(`conv-race-${t.tag}`, { clientMessageId: key, content: `[${key}] What does QQQ hold?` });
          // cancel as the answer is being recorded and published: the reply comes 200 ms after
          // the request, the cancel 0-760 ms after it is seen, so some land before and some after it
          await eventually(async () => ofType(await t.log.readRun(body.runId), 'model.turn.requested').length > 0 || null, 30_000, 'turn');
          await new Promise((r) => setTimeout(r, i * 40));
          try {
            await t.client.cancelRun(body.runId, { reason: 'race' });
          } catch (e) {
            if (!(e instanceof RunplaneHttpError && e.status === 409)) throw e; // settled before the cancel: fine
          }
          return body.runId;
        }),
      );
      const settledRuns = await Promise.all(runs.map((runId) => t.waitForSettlement(runId, 60_000)));
      // a second settlement, if any, would be appended by the other replica's concurrent decision:
      // give both lifecycle processes time to have handled every fact they were delivered
      await new Promise((r) => setTimeout(r, 1_500));
      const outcomes: Record<string, number> = {};
      const writers = new Set<string>();
      for (const [i, runId] of runs.entries()) {
        const events = await t.log.readRun(runId);
        const settlements = ofType(events, 'run.settled');
        expect(settlements).toHaveLength(1);
        expect(ofType(settledRuns[i]!, 'run.settled')).toHaveLength(1);
        const s = settlements[0]!;
        outcomes[s.event.data.outcome] = (outcomes[s.event.data.outcome] ?? 0) + 1;
        writers.add(s.event.writer?.instance ?? '?');
        const answerSeq = ofType(events, 'answer.published')[0]?.seq;
        const finished = ofType(events, 'run.execution.finished')[0]?.event.data.reason;
        if (s.event.data.outcome === 'completed') {
          expect(answerSeq).toBeLessThan(s.seq);
          expect(finished).toBe('answered');
        } else {
          // a cancel wins only when the runtime had not recorded its answer: then none is ever published
          expect(s.event.data.outcome).toBe('canceled');
          expect(finished).not.toBe('answered');
          expect(answerSeq).toBeUndefined();
        }
      }
      console.log(`cancel/completion race over ${runs.length} Runs: ${JSON.stringify(outcomes)}; settled by ${writers.size} lifecycle instance(s)`);
    } finally {
      await second.stop();
    }
  }, 180_000);
});
