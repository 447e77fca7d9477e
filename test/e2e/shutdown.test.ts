/**
 * Stopping services whose NATS server is frozen (docs/operations.md "Stopping a service"): with a
 * model turn and a tool call in flight and the stack's nats-server stopped with SIGSTOP, every
 * service given SIGTERM exits within its shutdown bound (`RUNPLANE_SHUTDOWN_GRACE_SECONDS`) on
 * its own, exit code 0 or 1 (never held until SIGKILL), its last shutdown line JSON saying it
 * stopped or what it could not finish. Before the bound, tools waited for its tool call's wake
 * for ever and the runtime about a minute. Then, NATS thawed and the services started again, what
 * was committed is still in the log and each Run settles once (the Run whose lease the stopped
 * runtime held is taken over by recovery: K6, K10).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import { SERVICES, type ServiceName } from '@runplane/devstack';
import { lostFacts, outcomeOf, waitForSettled, waitForType } from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const GRACE_SECONDS = 10;
const dir = mkdtempSync(join(tmpdir(), 'rp-shutdown-'));
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack('shutdown', {
    RUNPLANE_TEST_TOOLS: 'record_effect',
    RUNPLANE_RECORD_EFFECT_FILE: join(dir, 'effects.log'),
    RUNPLANE_DRAIN_SECONDS: '2',
    RUNPLANE_SHUTDOWN_GRACE_SECONDS: String(GRACE_SECONDS),
    RUNPLANE_LEASE_TTL_MS: '3000',
    RUNPLANE_RECOVERY_SWEEP_MS: '200',
    RUNPLANE_TOOL_CLAIM_TTL_MS: '3000',
  });
}, 180_000);
afterAll(async () => {
  t?.nats?.thaw();
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 180_000);

async function ask(key: string, steps: unknown[]): Promise<string> {
  await t.setScenario({ steps, then: 'error' }, key);
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
  expect(admitted.status).toBe(201);
  return admitted.body.runId;
}

type Line = Record<string, unknown> & { level: number; msg: string; context?: string };

/** The JSON lines of service `name` in the stack's log file (`[name] {...}`). */
function linesOf(name: ServiceName): Line[] {
  return readFileSync(t.stack.logFile, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith(`[${name}] {`))
    .map((l) => JSON.parse(l.slice(name.length + 3)) as Line);
}

describe('SIGTERM to every service while the NATS server is frozen, a model turn and a tool call in flight', () => {
  it('every service exits on its own within the shutdown bound; after a restart nothing committed is lost and each Run settles once', async () => {
    const slowModel = await ask(`model-${t.tag}`, [{ reply: { content: 'A.\n\nB.\n\nC.\n\nD.' }, paragraphDelayMs: 30_000 }]);
    const slowTool = await ask(`tool-${t.tag}`, [
      { reply: { content: 'Looking.\n\n', toolCalls: [{ name: 'record_effect', arguments: { tag: `x-${t.tag}`, sleepMs: 60_000 } }] } },
      { reply: { content: 'Done.' } },
    ]);
    await waitForType(t, slowModel, 'model.turn.requested', 30_000);
    await waitForType(t, slowTool, 'tool.call.dispatched', 30_000);
    const before = new Map<string, StoredEvent[]>([
      [slowModel, await t.log.readRun(slowModel)],
      [slowTool, await t.log.readRun(slowTool)],
    ]);

    await t.nats!.freeze();
    const at = Date.now();
    const exits = await Promise.all(
      SERVICES.map((name) => {
        const p = t.stack.services.get(name)!;
        const exited = new Promise<{ name: ServiceName; code: number | null; signal: NodeJS.Signals | null; ms: number }>((resolve) =>
          p.child.once('exit', (code, signal) => resolve({ name, code, signal, ms: Date.now() - at })),
        );
        // the test's own SIGKILL comes only well past the bound, so a hang shows as a killed process
        const kill = setTimeout(() => p.child.kill('SIGKILL'), (GRACE_SECONDS + 20) * 1000);
        p.child.kill('SIGTERM');
        return exited.finally(() => clearTimeout(kill));
      }),
    );
    process.stdout.write(
      `SHUTDOWN | frozen NATS, grace ${GRACE_SECONDS} s | ${exits.map((e) => `${e.name} ${e.code ?? e.signal} ${e.ms} ms`).join(', ')}\n`,
    );
    // none held past its bound (then killed by the test), none ended by a signal or a crash
    const late = exits.filter((e) => e.signal !== null || (e.code !== 0 && e.code !== 1) || e.ms >= (GRACE_SECONDS + 4) * 1000);
    expect(late.map((e) => `${e.name} ${e.code ?? e.signal} ${e.ms} ms`)).toEqual([]);
    for (const e of exits) {
      // the process's last lines reach the stack's log file through its stdout pipe, which may be
      // drained after its exit is seen (a full run saw the runtime's and tools' final line missing)
      const last = await eventually(
        async () => {
          const line = linesOf(e.name)
            .filter((l) => l.context === 'shutdown')
            .at(-1);
          return line && (line.msg === 'stopped' || /^shutdown bound passed/.test(line.msg)) ? line : null;
        },
        5_000,
        `${e.name}'s last shutdown line`,
      ).catch(() =>
        linesOf(e.name)
          .filter((l) => l.context === 'shutdown')
          .at(-1),
      );
      if (e.code === 0) expect(last).toMatchObject({ level: 30, msg: 'stopped' });
      else expect(last).toMatchObject({ level: 50, msg: expect.stringMatching(/^shutdown bound passed/), stage: expect.any(String) });
    }
    // the tools process waits for its call's wake (60 s) and the runtime for the appends of its handover: both hit the bound
    expect(exits.find((e) => e.name === 'tools')!.code).toBe(1);

    t.nats!.thaw();
    for (const name of SERVICES) await t.stack.startService(name);
    for (const [runId, events] of before) {
      const after = await waitForSettled(t, runId, 90_000);
      expect(lostFacts(events, after)).toEqual([]);
      const o = outcomeOf(after);
      expect(o.settlements).toBe(1);
      expect(o.duplicateEventIds).toEqual([]);
      process.stdout.write(`SHUTDOWN | ${runId === slowModel ? 'model turn' : 'tool call'} in flight: settled ${o.outcome} (${o.reason})\n`);
    }
    // the model turn was cut with the runtime: its Run is settled interrupted, not resumed (K10)
    expect(outcomeOf(await t.log.readRun(slowModel)).outcome).toBe('interrupted');
  }, 240_000);
});
