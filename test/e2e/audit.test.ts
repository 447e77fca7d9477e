/**
 * `runplane audit` on a real log (K11: "an auditor can replay any Run and check K1-K10 from its
 * events"): Runs of every kind the stack makes (research with tools, a wait answered by a human,
 * a child Run, an explicit Continue, a cancel) audit clean through the CLI, run as the ops user;
 * then violations are injected with the admin credentials (which can append what no service may)
 * and the audit names each one, at the event that breaks it, and exits non-zero.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { readCommands } from '@runplane/app-cli';
import { OUTSIDE_RUN_SUBJECTS, type AuditReport, type CheckId } from '@runplane/audit';
import { contextFrom, makeEvent, subjectTokenOf, type EventData, type EventType, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { downstreamEnvOf, natsEnvOf, repoRoot } from '@runplane/devstack';
import { runSubject } from '@runplane/eventlog';
import { foldRun } from '@runplane/run-facts';
import { waitForType } from '../support/faults.js';
import { eventually, scriptParentAndChild, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('audit', { RUNPLANE_ACK_WAIT_MS: '2000' }, { audit: 'report' }); // forges a violation per check
  t.log.onInvalid = () => undefined; // the garbage this file publishes is for the audit to report
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const CLI = () => join(repoRoot(), 'apps/cli/dist/main.js');
/** Runs `runplane <args>` (as the ops user unless `user` says otherwise); exit code and output. */
function cli(args: string[], user: 'ops' | 'downstream-1' = 'ops'): { status: number | null; stdout: string; stderr: string } {
  const nats = user === 'ops' ? natsEnvOf(t.users, 'ops') : downstreamEnvOf(t.users, user);
  const r = spawnSync(process.execPath, [CLI(), ...args], { env: { ...t.env, ...nats }, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

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

/** The reason the Run's settlement recorded (the projection's `reason` column). */
const settledReason = (events: StoredEvent[]) => ofType(events, 'run.settled')[0]!.data.reason;

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
    await scriptParentAndChild(t, parentKey, childKey, { reply: { content: 'DIA holds the 30 Dow stocks.' } });
    runs.parent = (await t.client.postMessage('conv-audit-child', { clientMessageId: parentKey, content: `[${parentKey}] Research DIA` })).body.runId;
    // a cancel while the model is slow
    const cancelKey = `cancel-${t.tag}`;
    await t.setScenario({ steps: [{ reply: { content: 'too late' }, delayMs: 20_000 }], then: 'error' }, cancelKey);
    runs.canceled = (
      await t.client.postMessage('conv-audit-cancel', { clientMessageId: cancelKey, content: `[${cancelKey}] What does DIA hold?` })
    ).body.runId;

    const waitOpened = ofType(await waitForType(t, runs.wait, 'wait.opened', 30_000), 'wait.opened')[0]!;
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

    // --projections with --run: that Run's events replayed into a fresh database, its rows compared
    const oneRun = audit('--run', runs.research, '--projections');
    const oneRebuilt = oneRun.report as AuditReport & { projections: { database: string; identical: boolean; eventsApplied: number } };
    expect([oneRun.status, oneRun.stderr]).toEqual([0, '']);
    expect(oneRebuilt.projections).toMatchObject({ identical: true, differences: [] });
    expect(oneRebuilt.projections.eventsApplied).toBe(oneRun.report.summary.events);
    // ... and it does compare: a live row of that Run changed by hand is a difference (exit 2); another Run's row is not its business
    const live = new pg.Client({ connectionString: t.env.DATABASE_URL });
    await live.connect();
    try {
      await live.query(`update runs set reason = 'tampered' where run_id = $1`, [runs.research]);
      const tampered = audit('--run', runs.research, '--projections');
      expect(tampered.status).toBe(2);
      expect((tampered.report as AuditReport & { projections: { differences: string[] } }).projections.differences).toEqual([
        expect.stringMatching(new RegExp(`^runs\\[run_id=${runs.research}\\]\\.reason: live "tampered" vs rebuilt `)),
      ]);
      expect(audit('--run', runs.wait, '--projections').status).toBe(0);
    } finally {
      await live.query(`update runs set reason = $2 where run_id = $1`, [runs.research, settledReason(await t.log.readRun(runs.research))]);
      await live.end();
    }

    // the read commands `runplane up` prints run as printed, in a shell that has none of the stack's variables
    const printed = readCommands({
      ...natsEnvOf(t.users, 'ops'),
      NATS_URL: t.env.NATS_URL!,
      ...(t.env.NATS_CA_FILE ? { NATS_CA_FILE: t.env.NATS_CA_FILE } : {}),
      DATABASE_URL: t.env.DATABASE_URL!,
      RUNPLANE_STREAM: t.env.RUNPLANE_STREAM!,
      RUNPLANE_SUBJECT_PREFIX: t.env.RUNPLANE_SUBJECT_PREFIX!,
      RUNPLANE_PARTITIONS: t.env.RUNPLANE_PARTITIONS!,
    });
    const shell = (line: string) =>
      spawnSync('bash', ['-c', line.replace('npm run runplane --', `node ${CLI()}`).replace('<runId>', runs.research)], {
        env: { PATH: process.env.PATH!, HOME: process.env.HOME! },
        cwd: repoRoot(),
        encoding: 'utf8',
        timeout: 60_000,
      });
    const timelineRun = shell(printed.timeline);
    expect([timelineRun.status, timelineRun.stderr]).toEqual([0, '']);
    expect(timelineRun.stdout).toContain('run.settled');
    const auditRun = shell(printed.audit);
    expect([auditRun.status, auditRun.stderr]).toEqual([0, '']);
    const rebuildRun = shell(printed.rebuild);
    expect([rebuildRun.status, rebuildRun.stderr]).toEqual([0, '']);
    expect(rebuildRun.stdout).toContain('rebuilt projections are identical to the live ones');
  }, 240_000);

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
    // K7: a model request reserving more input tokens than the Run's limit had left
    const admittedResearch = ofType(await t.log.readRun(runs.research), 'run.admitted')[0]!;
    const inputLimit = admittedResearch.data.limits.maxInputTokens!;
    const overReserved = await inject(runs.research, 'model.turn.requested', 'input', {
      turn: 10,
      model: 'scripted',
      inputTokensEstimate: inputLimit + 1,
    });
    // K11: a message on a Run subject that is not an event
    const garbage = await t.log.js.publish(runSubject(t.log.space, runs.continued, 'publication'), 'not an event {');
    // ... and one that is JSON but not an event of the catalogue
    const misshapen = await t.log.js.publish(
      runSubject(t.log.space, runs.continued, 'publication'),
      JSON.stringify({ ...settled, runId: runs.continued, owner: 'publication', eventId: 7, data: { outcome: 'maybe' } }),
    );
    // K11: a message stored on a subject of the stream that is not a Run subject (names no Run) is reported too
    const stray = await t.log.js.publish(`${t.log.space.prefix}.run.bogus`, 'not an event either');

    const one = audit('--run', runs.research);
    expect(one.status).toBe(2);
    expect(named(one.report, runs.research)).toEqual(
      expect.arrayContaining([
        `settlement-once@${secondSettlement}`,
        `dispatch-once@${secondDispatch}`,
        `writer-fenced@${secondDispatch}`,
        `budget-inside-grant@${overReserved}`,
      ]),
    );
    const all = audit('--all');
    expect(all.status).toBe(2);
    expect(named(all.report, runs.canceled)).toEqual([`writer-fenced@${reopened}`]);
    expect(named(all.report, runs.wait)).toEqual(expect.arrayContaining([`wake-once@${secondWake}`]));
    expect(named(all.report, runs.parent)).toEqual(expect.arrayContaining([`child-carved@${overCarve}`]));
    expect(named(all.report, runs.continued)).toEqual([`stored-verified@${garbage.seq}`, `stored-verified@${misshapen.seq}`]);
    expect(named(all.report, runs.child)).toEqual([]);
    expect(named(all.report, OUTSIDE_RUN_SUBJECTS)).toEqual([`stored-verified@${stray.seq}`]);
    expect(all.report.summary).toMatchObject({ runs: 7, clean: 1, broken: 6, anomalies: 3 });
    // the schema failure in words in the text report (path: message), the validator's whole list only in --json
    const misshapenJson = all.report.runs.find((r) => r.runId === runs.continued)!.checks.flatMap((c) => c.violations)[1]!;
    expect(JSON.parse(misshapenJson.detail!)).toEqual(expect.arrayContaining([expect.objectContaining({ path: ['eventId'] })]));
    const continuedText = cli(['audit', '--run', runs.continued]);
    expect(continuedText.status).toBe(2);
    expect(continuedText.stdout).toMatch(
      new RegExp(`K11 stored-verified at #${misshapen.seq}: .* is not a valid event: eventId: expected string, received number`),
    );
    expect(continuedText.stdout).not.toContain('"code"');

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

  it("names a completed settlement resting on a failed tool result (K9, the lifecycle's own rule), forged while the lifecycle was stopped", async () => {
    const key = `overclaim-${t.tag}`;
    await t.setScenario(
      {
        steps: [
          { reply: { content: '', toolCalls: [{ id: `call_${key}`, name: 'get_holdings', arguments: { fund: 'ZZNOPE' } }] } },
          { reply: { content: 'ZZNOPE holds the whole market.' } },
        ],
        then: 'error',
      },
      key,
    );
    await t.stack.stopService('lifecycle');
    let runId: string;
    let forged: number;
    try {
      runId = (await t.client.postMessage('conv-audit-overclaim', { clientMessageId: key, content: `[${key}] What does ZZNOPE hold?` })).body.runId;
      const events = await eventually(
        async () => {
          const read = await t.log.readRun(runId);
          return ofType(read, 'answer.published').length ? read : null;
        },
        30_000,
        'the answer published',
      );
      const receipts = ofType(events, 'tool.call.receipt').map((r) => r.data);
      expect(receipts.map((r) => r.status)).toEqual(['failed']);
      // what the lifecycle would never write: completed, nothing unanswered, though the one source failed
      forged = await inject(runId, 'run.settled', 'overclaim', {
        outcome: 'completed',
        reason: 'forged: the answer claims everything',
        passageIds: ofType(events, 'answer.published')[0]!.data.passageIds,
        receipts: receipts.map((r) => ({ toolCallId: r.toolCallId, name: r.name, status: r.status })),
        usage: { modelRequests: 2, toolCalls: 1, promptTokens: 0, completionTokens: 0 },
        unanswered: [],
      });
    } finally {
      await t.stack.startService('lifecycle');
    }
    const r = audit('--run', runId);
    expect(r.status).toBe(2);
    expect(named(r.report, runId)).toEqual([`results-established@${forged}`]);
    const text = cli(['audit', '--run', runId]);
    expect(text.stdout).toMatch(
      new RegExp(
        `K9 results-established at #${forged}: settled completed, but the log holds the result of get_holdings\\(\\{"fund":"ZZNOPE"\\}\\) \\[[^\\]]*call_${key}\\]`,
      ),
    );
  }, 90_000);

  it("with a downstream durable's credentials, timeline and audit read the log as the ops user does: direct gets, no consumer to create", async () => {
    expect(cli(['timeline', runs.research], 'downstream-1').status).toBe(0);
    for (const args of [
      ['audit', '--all', '--json'],
      ['audit', '--run', runs.research, '--json'],
    ]) {
      const [ops, downstream] = [cli(args, 'ops'), cli(args, 'downstream-1')];
      expect([args, downstream.status, downstream.stderr]).toEqual([args, ops.status, ops.stderr]);
      expect(JSON.parse(downstream.stdout) as AuditReport).toEqual(JSON.parse(ops.stdout) as AuditReport);
    }
  }, 120_000);

  it('refuses unclear requests with a reason and exit 1: neither --run nor --all, both, a bad run id, a bad time, a Run not in the log', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'audit', ...args], {
        env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
        encoding: 'utf8',
        timeout: 30_000,
      });
    const cases: [string[], RegExp][] = [
      [[], /name one Run \(--run <id>\) or every Run \(--all\)/],
      [['--run', randomUUID(), '--all'], /--run names one Run and --all every Run: give one of them, not both/],
      [['--run', 'a.b'], /not a run id: "a\.b"/],
      [['--all', '--since', 'yesterday-ish'], /--since: not a time/],
      [['--run', 'no-such-run'], /no events for run no-such-run in stream/],
      [
        ['--run', randomUUID(), '--since', '2026-01-01T00:00:00Z'],
        /--since selects Runs of --all by admission time; --run audits the named Run whole/,
      ],
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
      /reading stream NOPE on NATS at .*: user runplane-ops may not read a stream of that name .*check RUNPLANE_STREAM.*nothing was created/,
    );
  }, 60_000);
});
