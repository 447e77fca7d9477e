/**
 * `runplane audit` on a real log (K11: "an auditor can replay any Run and check K1-K10 from its
 * events"): Runs of every kind the stack makes (research with tools, a wait answered by a human,
 * a child Run, an explicit Continue, a cancel) audit clean through the CLI, run as the ops user;
 * then violations are injected with the admin credentials (which can append what no service may)
 * and the audit names each one, at the event that breaks it, and exits non-zero.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { OUTSIDE_RUN_SUBJECTS, type AuditReport, type CheckId } from '@runplane/audit';
import { contextFrom, makeEvent, subjectTokenOf, type EventData, type EventType, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { natsEnvOf, repoRoot } from '@runplane/devstack';
import { runSubject } from '@runplane/eventlog';
import { foldRun } from '@runplane/run-facts';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('audit', { RUNPLANE_ACK_WAIT_MS: '2000' }, { audit: 'report' }); // forges a violation per check
  t.log.onInvalid = () => undefined; // the garbage this file publishes is for the audit to report
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

/** Runs `runplane audit <args> --json` as the ops user; its exit code and parsed report. */
function audit(...args: string[]): { status: number | null; report: AuditReport; stderr: string } {
  const cli = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'audit', ...args, '--json'], {
    env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: cli.status, report: cli.stdout ? (JSON.parse(cli.stdout) as AuditReport) : (null as never), stderr: cli.stderr };
}

/** The violations the report names for `runId`, as `check@seq`. */
function named(report: AuditReport, runId: string): string[] {
  const run = report.runs.find((r) => r.runId === runId)!;
  return run.checks.flatMap((c) => c.violations.map((v) => `${c.id}@${v.seq ?? '-'}`));
}

/** Appends `data` as a new `type` event of the Run with the admin's log, conditionally on its subject's last sequence (as the event log would): a verified fact no service would write. */
async function inject<T extends EventType>(runId: string, type: T, key: string, data: EventData<T>): Promise<number> {
  const events = await t.log.readRun(runId);
  const event = makeEvent(type, contextFrom(events[0]!.event), `forged/${key}`, data, new Date()) as RunEvent;
  const facts = foldRun(runId, events);
  const result = await t.log.append(event, facts.lastSeqByOwner[subjectTokenOf(event)]);
  return result.seq;
}

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

const runs: Record<'research' | 'wait' | 'parent' | 'child' | 'continued' | 'canceled', string> = {} as never;

describe('runplane audit (K11)', () => {
  it('Runs of every kind the stack makes audit clean from the log alone, read as the ops user', async () => {
    // research with tool calls, answered
    const research = await t.client.postMessage('conv-audit', { clientMessageId: `research-${t.tag}`, content: 'What does DIA hold?' });
    runs.research = research.body.runId;
    // a question for a human, answered once
    const waitKey = `wait-${t.tag}`;
    await t.setScenario(
      {
        steps: [
          { reply: { content: '', toolCalls: [{ id: `call_ask_${waitKey}`, name: 'ask_human', arguments: { question: 'Which share class?' } }] } },
          { reply: { content: 'Using the class you named: done.' } },
        ],
        then: 'error',
      },
      waitKey,
    );
    runs.wait = (
      await t.client.postMessage('conv-audit-wait', { clientMessageId: waitKey, content: `[${waitKey}] Compare the share classes` })
    ).body.runId;
    // a child Run spawned by its parent
    const parentKey = `parent-${t.tag}`;
    const childKey = `kid-${t.tag}`;
    await t.setScenario(
      {
        steps: [
          {
            reply: {
              content: '',
              toolCalls: [{ id: `call_spawn_${parentKey}`, name: 'spawn_subagent', arguments: { question: `[${childKey}] What does DIA hold?` } }],
            },
          },
          { reply: { content: "The parent's answer, from its sub-agent." } },
        ],
        then: 'error',
      },
      parentKey,
    );
    await t.setScenario({ steps: [{ reply: { content: 'DIA holds the 30 Dow stocks.' } }], then: 'error' }, childKey);
    runs.parent = (await t.client.postMessage('conv-audit-child', { clientMessageId: parentKey, content: `[${parentKey}] Research DIA` })).body.runId;
    // a cancel while the model is slow
    const cancelKey = `cancel-${t.tag}`;
    await t.setScenario({ steps: [{ reply: { content: 'too late' }, delayMs: 20_000 }], then: 'error' }, cancelKey);
    runs.canceled = (
      await t.client.postMessage('conv-audit-cancel', { clientMessageId: cancelKey, content: `[${cancelKey}] What does DIA hold?` })
    ).body.runId;

    const waitOpened = await eventually(async () => ofType(await t.log.readRun(runs.wait), 'wait.opened')[0] ?? null, 30_000, 'the wait opened');
    await eventually(
      async () => (ofType(await t.log.readRun(runs.canceled), 'model.turn.requested').length ? true : null),
      30_000,
      'the slow turn requested',
    );
    await t.client.cancelRun(runs.canceled, { reason: 'the audit test cancels it' });
    await eventually(
      async () => {
        try {
          await t.client.answerWait(runs.wait, waitOpened.data.waitId, 'Class A');
          return true;
        } catch {
          return null; // not parked yet (409): the lease is still being released
        }
      },
      20_000,
      'the wait answered',
    );
    await t.waitForSettlement(runs.research, 60_000);
    // an explicit Continue of the research Run
    runs.continued = (
      await t.client.postMessage('conv-audit', {
        clientMessageId: `continue-${t.tag}`,
        content: 'Now compare it with SPY',
        continuationOfRunId: runs.research,
      })
    ).body.runId;
    const parentEvents = await t.waitForSettlement(runs.parent, 60_000);
    runs.child = ofType(parentEvents, 'child.run.requested')[0]!.data.childRunId;
    for (const runId of [runs.wait, runs.canceled, runs.continued, runs.child]) await t.waitForSettlement(runId, 60_000);

    const { status, report, stderr } = audit('--all');
    expect(stderr).toBe('');
    expect(report.runs.flatMap((r) => named(report, r.runId).map((v) => `${r.runId} ${v}`))).toEqual([]);
    expect(status).toBe(0);
    expect(report.summary).toMatchObject({ runs: 6, clean: 6, broken: 0, open: 0, anomalies: 0 });
    expect(Object.fromEntries(report.runs.map((r) => [r.runId, r.outcome]))).toEqual({
      [runs.research]: 'completed',
      [runs.wait]: 'completed',
      [runs.parent]: 'completed',
      [runs.child]: 'completed',
      [runs.canceled]: 'canceled',
      [runs.continued]: expect.stringMatching(/completed|partial/),
    });
    // every kind of check ran somewhere
    const ran = (id: CheckId) => report.summary.checks[id].ran;
    for (const id of [
      'admission-once',
      'settlement-once',
      'writer-fenced',
      'dispatch-once',
      'budget-inside-grant',
      'child-carved',
      'subject-chains',
    ] as const)
      expect([id, ran(id) > 0]).toEqual([id, true]);
    // the projections rebuilt from the log equal the live ones (once the projector caught up), and the fresh database is dropped
    const withProjections = await eventually(
      async () => {
        const r = audit('--all', '--projections');
        return r.status === 0 ? r : null;
      },
      30_000,
      'the projections rebuilt identical',
    );
    const rebuilt = withProjections.report as AuditReport & { projections: { database: string; identical: boolean; eventsApplied: number } };
    expect(rebuilt.projections).toMatchObject({ identical: true, differences: [] });
    expect(rebuilt.projections.eventsApplied).toBe(report.summary.events);
    const db = new pg.Client({ connectionString: t.env.DATABASE_URL });
    await db.connect();
    try {
      const left = await db.query('select datname from pg_database where datname = $1', [rebuilt.projections.database]);
      expect(left.rowCount).toBe(0);
    } finally {
      await db.end();
    }
    expect(ran('links')).toBe(2); // the continuation and the child
    expect(ran('wake-once')).toBe(2); // the answered wait, the child's result on its parent
  }, 180_000);

  it('names each violation injected with the admin credentials, at the event that breaks it, and exits 2', async () => {
    expect(runs.research).toBeDefined();
    // K9: a forged second settlement
    const settled = ofType(await t.log.readRun(runs.research), 'run.settled')[0]!;
    const secondSettlement = await inject(runs.research, 'run.settled', 'settled', {
      ...settled.data,
      outcome: 'failed',
      reason: 'forged by the admin',
    });
    // K6: the runtime subject of a settled (canceled) Run appended to after its fence and settlement
    const reopened = await inject(runs.canceled, 'model.turn.requested', 'turn', { turn: 9, model: 'scripted' });
    // K5: a second dispatch of a call that already has its receipt
    const researchCalls = ofType(await t.log.readRun(runs.research), 'tool.call.dispatched');
    expect(researchCalls.length).toBeGreaterThan(0);
    const secondDispatch = await inject(runs.research, 'tool.call.dispatched', 'dispatch', researchCalls[0]!.data);
    // K10: the wait answered a second time
    const answered = ofType(await t.log.readRun(runs.wait), 'wait.answered')[0]!;
    const secondWake = await inject(runs.wait, 'wait.answered', 'wake', { ...answered.data, answer: 'Class B', requestId: 'forged' });
    // K7: a child carved with more than its parent had
    const requested = ofType(await t.log.readRun(runs.parent), 'child.run.requested')[0]!;
    const overCarve = await inject(runs.parent, 'child.run.requested', 'carve', {
      ...requested.data,
      childRunId: `${requested.data.childRunId.slice(0, 100)}-x`,
      limits: { ...requested.data.limits, maxModelRequests: 1_000 },
    });
    // K11: a message on a Run subject that is not an event
    const garbage = await t.log.js.publish(runSubject(t.log.space, runs.continued, 'publication'), 'not an event {');
    // K11: a message stored on a subject of the stream that is not a Run subject (names no Run) is reported too
    const stray = await t.log.js.publish(`${t.log.space.prefix}.run.bogus`, 'not an event either');

    const one = audit('--run', runs.research);
    expect(one.status).toBe(2);
    expect(named(one.report, runs.research)).toEqual(
      expect.arrayContaining([`settlement-once@${secondSettlement}`, `dispatch-once@${secondDispatch}`, `writer-fenced@${secondDispatch}`]),
    );
    const all = audit('--all');
    expect(all.status).toBe(2);
    expect(named(all.report, runs.canceled)).toEqual([`writer-fenced@${reopened}`]);
    expect(named(all.report, runs.wait)).toEqual(expect.arrayContaining([`wake-once@${secondWake}`]));
    expect(named(all.report, runs.parent)).toEqual(expect.arrayContaining([`child-carved@${overCarve}`]));
    expect(named(all.report, runs.continued)).toEqual([`stored-verified@${garbage.seq}`]);
    expect(named(all.report, runs.child)).toEqual([]);
    expect(named(all.report, OUTSIDE_RUN_SUBJECTS)).toEqual([`stored-verified@${stray.seq}`]);
    expect(all.report.summary).toMatchObject({ runs: 7, clean: 1, broken: 6, anomalies: 2 });

    // the text report says the same in words, and --since narrows the Runs reported
    const text = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'audit', '--run', runs.canceled], {
      env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(text.status).toBe(2);
    expect(text.stdout).toContain(`BROKEN run ${runs.canceled} (canceled,`);
    expect(text.stdout).toMatch(
      new RegExp(`K6 writer-fenced at #${reopened}: model.turn.requested appended on the runtime subject after the settlement`),
    );
    const future = audit('--all', '--since', '2999-01-01T00:00:00Z');
    expect([future.status, future.report.summary.runs]).toEqual([0, 0]);
  }, 120_000);

  it('refuses unclear requests with a reason and exit 1: neither --run nor --all, a bad run id, a bad time, a Run not in the log', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'audit', ...args], {
        env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
        encoding: 'utf8',
        timeout: 30_000,
      });
    const cases: [string[], RegExp][] = [
      [[], /name one Run \(--run <id>\) or every Run \(--all\)/],
      [['--run', 'a.b'], /not a run id: "a\.b"/],
      [['--all', '--since', 'yesterday-ish'], /--since: not a time/],
      [['--run', 'no-such-run'], /no events for run no-such-run in stream/],
    ];
    for (const [args, reason] of cases) {
      const r = cli(...args);
      expect([args, r.status]).toEqual([args, 1]);
      expect(r.stderr).toMatch(reason);
    }
    // another stream name than the deployment's: the ops user may not even look it up, and the reason says so
    const other = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'audit', '--all'], {
      env: { ...t.env, ...natsEnvOf(t.users, 'ops'), RUNPLANE_STREAM: 'NOPE' },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(other.status).toBe(1);
    expect(other.stderr).toMatch(
      /reading stream NOPE on NATS at .*: user runplane-ops may not read a stream of that name .*check RUNPLANE_STREAM; nothing was created/,
    );
  }, 60_000);
});
