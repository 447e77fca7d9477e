/**
 * Fault-injection helpers shared by the fault suites (docs/recovery.md "Tests"): kill a service with SIGKILL,
 * count the executions of the `record_effect` test tool in its file, count the scripted model's
 * requests per key, poll the log through a NATS outage, and check the three outcomes every fault
 * test asserts: each Run settles exactly once, nothing is executed twice, nothing committed is lost.
 * A restartable NATS server is `TestNatsServer` (test/support/nats-server.ts, `bounce`).
 */
import { existsSync, readFileSync } from 'node:fs';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import type { ServiceName } from '@runplane/devstack';
import { changedSince, RUN_WAKE_FALLBACK_MS, runMark, runReader } from './run-wake.js';
import type { TestStack } from './stack.js';

export const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Lines `record_effect` wrote to `file` for a Run: one per execution. */
export function effectsOf(file: string, runId: string): string[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith(`${runId} `));
}

/** Chat requests the scripted model received for a scenario key. */
export async function modelRequestsFor(t: TestStack, key: string): Promise<number> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  const body = (await res.json()) as { perKey?: Record<string, number> };
  return body.perKey?.[key] ?? 0;
}

/** The Run's events, or null while the log cannot be read (NATS restarting). */
async function tryRead(reader: ReturnType<typeof runReader>): Promise<StoredEvent[] | null> {
  try {
    return await reader.read();
  } catch {
    return null;
  }
}

/**
 * Reads the Run's events until `pred` holds for them, and resolves with them: again each time a
 * message is published on one of its subjects, and at least every second (through outages:
 * test/support/run-wake.ts), each time only the events stored since the last read (`runReader`).
 */
export async function until(t: TestStack, runId: string, pred: (events: StoredEvent[]) => boolean, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  let last: StoredEvent[] = [];
  const reader = runReader(t.log, runId);
  for (;;) {
    const mark = runMark(t.log, runId);
    const events = await tryRead(reader);
    if (events) {
      last = events;
      if (pred(events)) return events;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} of ${runId}; events: ${last.map((e) => e.event.type).join(', ')}`);
    await changedSince(t.log, runId, mark, Math.min(RUN_WAKE_FALLBACK_MS, Math.max(10, deadline - Date.now())));
  }
}

export const waitForType = (t: TestStack, runId: string, type: RunEvent['type'], timeoutMs = 30_000) =>
  until(t, runId, (ev) => ev.some((e) => e.event.type === type), timeoutMs, type);

export const waitForSettled = (t: TestStack, runId: string, timeoutMs = 60_000) =>
  until(t, runId, (ev) => ev.some((e) => e.event.type === 'run.settled'), timeoutMs, 'run.settled');

/**
 * Kills a service process with SIGKILL and waits until it is gone; resolves with the moment of the
 * kill. `replica` picks one of several replicas (index in start order among the live ones; default the first).
 */
export async function kill9(t: TestStack, name: ServiceName, replica = 0): Promise<number> {
  const p = t.stack.replicas.get(name)![replica]!;
  const exited = new Promise((r) => p.child.once('exit', r));
  p.child.kill('SIGKILL');
  const at = Date.now();
  await exited;
  return at;
}

/** What a fault test checks of one Run, read from its log. */
export interface RunOutcome {
  settlements: number;
  outcome: string | undefined;
  reason: string | undefined;
  /** Fences of a fault, cancel or deadline (recovery's `settling` fences, which close a Run that finished with a tool call in flight, are not counted). */
  fenced: number;
  turnsRequested: number;
  turnsCompleted: number;
  dispatched: number;
  receipts: number;
  passages: number;
  published: number;
  /** Event ids stored more than once (a decision recorded twice). */
  duplicateEventIds: string[];
}

export function outcomeOf(events: StoredEvent[]): RunOutcome {
  const settled = ofType(events, 'run.settled');
  const ids = events.map((e) => e.event.eventId);
  return {
    settlements: settled.length,
    outcome: settled[0]?.data.outcome,
    reason: settled[0]?.data.reason,
    fenced: ofType(events, 'run.fenced').filter((f) => f.data.reason !== 'settling').length,
    turnsRequested: ofType(events, 'model.turn.requested').length,
    turnsCompleted: ofType(events, 'model.turn.completed').length,
    dispatched: ofType(events, 'tool.call.dispatched').length,
    receipts: ofType(events, 'tool.call.receipt').length,
    passages: ofType(events, 'passage.committed').length,
    published: ofType(events, 'answer.published').length,
    duplicateEventIds: ids.filter((id, i) => ids.indexOf(id) !== i),
  };
}

/** Facts committed before a fault that must all still be in the log after it (by event id). */
export function lostFacts(before: StoredEvent[], after: StoredEvent[]): string[] {
  const have = new Set(after.map((e) => e.event.eventId));
  return before.filter((e) => !have.has(e.event.eventId)).map((e) => `${e.event.type}@${e.seq}`);
}

/** One row of the fault matrix, printed for the closing note. */
export function reportRow(row: { fault: string; runs: number; settled: string; duplicates: number; lost: number; settleMs: number | string }): void {
  process.stdout.write(`FAULT-MATRIX | ${row.fault} | ${row.runs} | ${row.settled} | ${row.duplicates} | ${row.lost} | ${row.settleMs} ms |\n`);
}
