/**
 * Two tools workers over one test space, as the replay and claim tests run them: each a
 * DispatchController as built in dist/ (its tool threads load dist/tool-worker.js) on a connection
 * of its own, so a claim holder of its own, running the `record_effect` test tool.
 */
import { existsSync, readFileSync } from 'node:fs';
import { Kvm } from '@nats-io/kv';
import { subjectTokenOf, type Owner, type StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit/command-handler';
import { DispatchController, type ToolsSettings } from '../dist/dispatch.controller.js';
import { ClaimStore } from '../dist/claims.js';
import { SUITE_NATS } from '../../../test/support/nats-server.js';

/**
 * The settings of a tools worker in a test that runs the `record_effect` test tool (each
 * execution appends a line to `effectFile`): one tool thread, a 6 s claim, no sweep or abandon
 * during the test.
 */
export const recordingWorkerSettings = (effectFile: string): ToolsSettings => ({
  timeoutMs: 20_000,
  claimTtlMs: 6_000,
  sweepMs: 60_000,
  abandonMs: 0,
  threads: 1,
  testTools: ['record_effect'],
  recordEffectFile: effectFile,
});

/** The lines `record_effect` wrote to `effectFile` for `runId`, one an execution. */
export const effectLines = (effectFile: string, runId: string): string[] =>
  existsSync(effectFile)
    ? readFileSync(effectFile, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith(`${runId} `))
    : [];

/** Appends a History's events to the real log in order (each conditional on its subject's last sequence). */
export async function appendAll(log: EventLog, events: StoredEvent[], lasts: Partial<Record<Owner, number>>): Promise<StoredEvent[]> {
  const out: StoredEvent[] = [];
  for (const { event } of events) {
    const token = subjectTokenOf(event);
    const r = await log.append(event, lasts[token] ?? 0);
    lasts[token] = r.seq;
    out.push(r.stored);
  }
  return out;
}

export interface TwoWorkers {
  logA: EventLog;
  logB: EventLog;
  a: DispatchController;
  b: DispatchController;
  /** Shuts both workers down, destroys the space's claim bucket and stream, and closes both connections. */
  close(): Promise<void>;
}

/** Connects two tools workers to `space` on `natsUrl`, A with `settingsA`, B with `settingsB`. */
export async function twoWorkers(
  natsUrl: string,
  space: { stream: string; prefix: string },
  settingsA: ToolsSettings,
  settingsB: ToolsSettings,
): Promise<TwoWorkers> {
  const logA = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'tools' });
  const logB = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'tools' });
  const a = new DispatchController(logA, new RunCommandHandler(logA, 'tools'), settingsA);
  const b = new DispatchController(logB, new RunCommandHandler(logB, 'tools'), settingsB);
  return {
    logA,
    logB,
    a,
    b,
    async close() {
      await a.onApplicationShutdown();
      await b.onApplicationShutdown();
      await (await new Kvm(logA.nc).open(ClaimStore.bucketFor(logA))).destroy().catch(() => undefined);
      await logA.destroyStream();
      await logA.close();
      await logB.close();
    },
  };
}
