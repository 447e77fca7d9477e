/**
 * The main job end to end, every service as its own process on the real JetStream and
 * PostgreSQL: admission -> runtime (model through the openai client, scripted research policy)
 * -> tools on the real issuer files -> publication -> lifecycle settlement; projections rebuilt.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { EventCatalog, type EventType, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { ResultStore, runSubject } from '@runplane/eventlog';
import { extractUnanswered } from '@runplane/app-scripted-model';
import { inspectionCacheEnv } from '@runplane/devstack';
import { HoldingsLibrary } from '@runplane/holdings';
import { createProjectionOrm, getRunView, rebuildProjections } from '@runplane/projections';
import { describeWithSharedData } from '../support/shared-data.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const DEFAULT_QUESTION = 'Compare the holdings of SPY and QQQ: verify the disclosure date of each file and identify gaps in coverage';

let t: TestStack;
let startedAt: number;
beforeAll(async () => {
  startedAt = Date.now();
  t = await startTestStack('main');
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const types = (events: StoredEvent[]) => events.map((e) => e.event.type);
const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

describeWithSharedData('default question on the real holdings files', (dir) => {
  let runId: string;
  let events: StoredEvent[];
  let answer: string;

  beforeAll(async () => {
    const admitted = await t.client.postMessage('conv-main', { clientMessageId: 'default-question', content: DEFAULT_QUESTION });
    expect(admitted.status).toBe(201);
    runId = admitted.body.runId;
    events = await t.waitForSettlement(runId, 90_000);
    answer = (await t.client.getAnswer(runId)).text;
  }, 120_000);

  // the folder the stack's tools were given (devstack inspectionCacheEnv), unless the run turned it
  // off (RUNPLANE_TOOLS_INSPECTION_CACHE_DIR empty) or the default is not private here: then skipped, visibly
  const folder = inspectionCacheEnv(process.env).RUNPLANE_TOOLS_INSPECTION_CACHE_DIR ?? process.env.RUNPLANE_TOOLS_INSPECTION_CACHE_DIR ?? '';
  const itWithStore = folder ? it : it.skip;
  itWithStore("opens the stack's inspection folder, which then holds an entry for every data file (RUNPLANE_TOOLS_INSPECTION_CACHE_DIR)", () => {
    // the version folder of the tools' code, marked used when a thread opened it for this Run
    // (another checkout's stacks may have opened their own version meanwhile); its entries may
    // have been written by an earlier stack: this stack then read them
    const opened = readdirSync(folder).filter((v) => statSync(join(folder, v)).mtimeMs >= startedAt - 1000);
    const kept = opened.map((v) => readdirSync(join(folder, v)).filter((f) => !f.endsWith('.partial')).length);
    expect(Math.max(0, ...kept)).toBeGreaterThanOrEqual(readdirSync(dir).filter((f) => !f.startsWith('.')).length);
  });

  it('settles completed exactly once, by the lifecycle', () => {
    const settlements = events.filter((e) => e.event.type === 'run.settled');
    expect(settlements).toHaveLength(1);
    expect(settlements[0]!.event.owner).toBe('lifecycle');
    expect(settlements[0]!.subject).toBe(runSubject(t.log.space, runId, 'lifecycle'));
    expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('completed');
  });

  it('records admission, model turns, tool proposal, dispatch and receipt, passages, one settlement, in that causal order', () => {
    const seq = types(events);
    expect(seq[0]).toBe('run.admitted');
    expect(seq[seq.length - 1]).toBe('run.settled');
    const first = (t: EventType) => seq.indexOf(t);
    expect(first('model.turn.requested')).toBeLessThan(first('model.turn.completed'));
    expect(first('model.turn.completed')).toBeLessThan(first('tool.call.proposed'));
    expect(first('tool.call.proposed')).toBeLessThan(first('tool.call.dispatched'));
    expect(first('tool.call.dispatched')).toBeLessThan(first('tool.call.receipt'));
    // passages are committed while the answer streams (a paragraph, then its passage), so the
    // first passage may come before or after the end of execution; the answer is published after both
    expect(first('model.output.paragraph')).toBeLessThan(first('passage.committed'));
    expect(first('run.execution.finished')).toBeLessThan(first('answer.published'));
    expect(first('passage.committed')).toBeLessThan(first('answer.published'));
    expect(first('answer.published')).toBeLessThan(first('run.settled'));
    expect(ofType(events, 'model.turn.requested').length).toBeGreaterThanOrEqual(2);
    expect(ofType(events, 'passage.committed').length).toBeGreaterThanOrEqual(2);
    // every tool call proposed got exactly one dispatch and one receipt
    const proposed = ofType(events, 'tool.call.proposed')
      .map((e) => e.data.toolCallId)
      .sort();
    expect(
      ofType(events, 'tool.call.dispatched')
        .map((e) => e.data.toolCallId)
        .sort(),
    ).toEqual(proposed);
    expect(
      ofType(events, 'tool.call.receipt')
        .map((e) => e.data.toolCallId)
        .sort(),
    ).toEqual(proposed);
    // stream order is strictly increasing
    const seqs = events.map((e) => e.seq);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
  });

  it("appends every event under its owner: the subject names the owner the catalogue gives its type (recovery's fences stand on the executor subject they close)", () => {
    for (const { subject, event } of events) {
      expect(event.owner).toBe(EventCatalog[event.type].owner);
      const token = event.type === 'run.fenced' ? event.data.fencedSubject : event.owner;
      expect(subject).toBe(runSubject(t.log.space, runId, token));
    }
  });

  it('answers with the checked figures, recomputed through the product', async () => {
    // The figures as the product computes them (the tools service's library on the same files)...
    const lib = new HoldingsLibrary({ dir, dataSet: 'shared' });
    const closest = await lib.compareHoldings({ fundA: 'SPY', fundB: 'QQQ' });
    expect([closest.a.file, closest.b.file]).toEqual(['SPY_2025-09-30.xlsx', 'QQQ_2025-09-26.csv']);
    // (the policy asks for those two files by date, as the receipt's selection records)
    const cmp = await lib.compareHoldings({ fundA: 'SPY', fundB: 'QQQ', asOfA: '2025-09-30', asOfB: '2025-09-26' });
    expect(cmp.selectionA.rule).toBe('requested-date');
    expect(cmp.a.provenance).toMatchObject({ file: 'SPY_2025-09-30.xlsx', layout: 'ssga-xlsx', asOfHow: 'preamble', asOfText: 'As of 30-Sep-2025' });
    expect(cmp.standardOverlap.toFixed(1)).toBe('51.4');
    // ...equal the checked values from the files...
    expect(cmp.a.asOf).toBe('2025-09-30');
    expect(cmp.a.securityCount).toBe(503);
    expect(cmp.a.nonSecurityLines.filter((l) => l.kind === 'cash')).toHaveLength(1);
    expect(cmp.b.asOf).toBe('2025-09-26');
    expect(cmp.b.securityCount).toBe(101);
    expect(cmp.commonCount).toBe(88);
    expect(cmp.weightOfBHeldInA.toFixed(1)).toBe('95.2');
    expect(cmp.weightOfAHeldInB.toFixed(1)).toBe('51.4');
    expect(cmp.onlyInB).toHaveLength(13);
    // ...and the receipt the tools service recorded carries the same result (stored by reference)
    const receipt = ofType(events, 'tool.call.receipt').find((r) => r.data.name === 'compare_holdings');
    expect(receipt?.data.status).toBe('succeeded');
    const stored = receipt!.data.resultRef ? await (await ResultStore.open(t.log)).get(receipt!.data.resultRef) : receipt!.data.result;
    expect(stored).toEqual(JSON.parse(JSON.stringify(cmp)));
    // ...and the published answer shows them, dates as YYYY-MM-DD.
    expect(answer).toContain('2025-09-30');
    expect(answer).toContain('2025-09-26');
    expect(answer).toMatch(/503 securities plus a cash line/);
    expect(answer).toMatch(/101 securities/);
    expect(answer).toMatch(/88 securities in common/);
    expect(answer).toContain('95.2%');
    expect(answer).toContain('51.4%');
    for (const line of cmp.onlyInB) expect(answer).toContain(line.ticker!);
    expect(answer).toMatch(/13 QQQ names/);
    expect(answer).toContain('The standard overlap (the smaller weight summed over common holdings) is 51.4%');
    // ...and its machine-readable list of unanswered parts (kept out of the text) is empty.
    expect(extractUnanswered(answer)).toBeNull();
    expect(ofType(events, 'answer.published')[0]!.data.unanswered).toEqual([]);
    expect(ofType(events, 'run.settled')[0]!.data.unanswered).toEqual([]);
  });

  it('projects the Run into PostgreSQL and a rebuild from the log gives identical rows (K11)', async () => {
    const view = await eventually(
      async () => {
        const v = await t.client.getRun(runId);
        return v?.status === 'settled' ? v : null;
      },
      20_000,
      'settled projection',
    );
    expect(view.outcome).toBe('completed');
    expect(view.passages).toBe(ofType(events, 'passage.committed').length);
    expect(view.lastSeq).toBe(events[events.length - 1]!.seq);
    const rebuilt = await rebuildProjections({ log: t.log, databaseUrl: t.env.DATABASE_URL!, targetDatabase: `rp_${t.tag}_rebuild` });
    try {
      expect(rebuilt.differences).toEqual([]);
      expect(rebuilt.identicalToLive).toBe(true);
      expect(rebuilt.eventsApplied).toBeGreaterThanOrEqual(events.length);
    } finally {
      const { dropDatabase } = await import('@runplane/devstack');
      await dropDatabase(t.env.DATABASE_URL!.replace(/\/[^/]+$/, `/rp_${t.tag}_rebuild`));
    }
    const orm = await createProjectionOrm({ databaseUrl: t.env.DATABASE_URL! });
    try {
      expect((await getRunView(orm, runId))?.outcome).toBe('completed');
    } finally {
      await orm.close();
    }
  });
  it('redelivers the whole log to restarted services with fresh consumers: nothing is appended, executed or asked again (K5, K11)', async () => {
    const before = await t.log.readRun(runId);
    const requestsBefore = await t.modelRequests();
    const reactors = ['runtime', 'tools', 'publication', 'lifecycle'] as const;
    const stream = t.env.RUNPLANE_STREAM!;
    // a service has one durable consumer per subject filter: <prefix>-<svc> or <prefix>-<svc>-<owner>
    const durablesOf = async (svc: string) => {
      const names: string[] = [];
      for await (const c of t.log.jsm.consumers.list(stream)) {
        const n = c.name;
        if (n === `${t.env.RUNPLANE_SUBJECT_PREFIX}-${svc}` || n.startsWith(`${t.env.RUNPLANE_SUBJECT_PREFIX}-${svc}-`)) names.push(n);
      }
      return names;
    };
    for (const svc of reactors) {
      await t.stack.stopService(svc);
      const names = await durablesOf(svc);
      expect(names.length).toBeGreaterThan(0);
      for (const name of names) await t.log.jsm.consumers.delete(stream, name);
    }
    for (const svc of reactors) await t.stack.startService(svc);
    await eventually(
      async () => {
        for (const svc of reactors) {
          const names = await durablesOf(svc);
          if (names.length === 0) return null;
          for (const name of names) {
            const info = await t.log.jsm.consumers.info(stream, name);
            if (info.num_pending > 0 || info.num_ack_pending > 0) return null;
          }
        }
        return true;
      },
      30_000,
      'every event redelivered and acknowledged',
    );
    expect(await t.log.readRun(runId)).toEqual(before);
    expect(await t.modelRequests()).toBe(requestsBefore);
  }, 90_000);
});

describe('K8 first cut: a fund that is not in the data', () => {
  it('gets a failed receipt and the Run still settles with an answer saying the fund is not covered: partial, naming it (K9)', async () => {
    const { body } = await t.client.postMessage('conv-k8', { clientMessageId: 'k8-unknown-fund', content: 'What are the holdings of XYZQ?' });
    const events = await t.waitForSettlement(body.runId);
    const receipts = ofType(events, 'tool.call.receipt');
    const failed = receipts.find((r) => r.data.status === 'failed');
    expect(failed?.data.name).toBe('get_holdings');
    expect(failed?.data.error?.code).toBe('unknown_fund');
    const settled = ofType(events, 'run.settled')[0]!;
    expect(settled.data.outcome).toBe('partial');
    expect(settled.data.unanswered?.some((u) => u.part.includes('XYZQ'))).toBe(true);
    expect(settled.data.receipts).toContainEqual({ toolCallId: failed!.data.toolCallId, name: 'get_holdings', status: 'failed' });
    const answer = (await t.client.getAnswer(body.runId)).text;
    expect(answer).toMatch(/XYZQ[^.]*not covered/);
  }, 90_000);
});

describe('K6 first cut: two runtime processes on one durable consumer', () => {
  it('fence each other: every turn is requested once and the model is called once per recorded turn', async () => {
    await t.stack.startService('runtime'); // a second runtime process sharing the rp-runtime-p<N> consumers
    const requestsBefore = await t.modelRequests();
    const questions = [
      'Compare the holdings of IVV and SPY',
      'Compare the holdings of QQQ and ARKK',
      'Compare the holdings of DIA and SPY',
      'What does ARKK hold?',
    ];
    const posted = await Promise.all(questions.map((content, i) => t.client.postMessage('conv-k6', { clientMessageId: `k6-${i}`, content })));
    let turns = 0;
    for (const { body } of posted) {
      const events = await t.waitForSettlement(body.runId, 90_000);
      const requested = ofType(events, 'model.turn.requested').map((e) => e.data.turn);
      expect(requested).toEqual(requested.map((_, i) => i + 1));
      expect(ofType(events, 'run.settled')).toHaveLength(1);
      expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('completed');
      const dispatched = ofType(events, 'tool.call.dispatched').map((e) => e.data.toolCallId);
      expect(new Set(dispatched).size).toBe(dispatched.length);
      turns += requested.length;
    }
    expect((await t.modelRequests()) - requestsBefore).toBe(turns);
  }, 120_000);
});
