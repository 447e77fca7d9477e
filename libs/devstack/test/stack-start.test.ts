/**
 * A local stack that cannot start fails at once and leaves nothing running (what `npm run demo`
 * and `runplane up` stand on): a nats-server that does not answer is stopped and named (one whose
 * port another process took first is started on another port); a service
 * that exits at start-up fails the start naming it, without waiting for the others, and the
 * processes still starting (here a projector waiting for a PostgreSQL that never answers) are
 * stopped. Before, the nats-server and the hanging projector were left running, so the demo never
 * exited, and the failure was reported only when the last process was ready or timed out (60 s).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import getPort from 'get-port';
import { repoRoot, runningProcesses, startNatsCluster, startSecuredNats, startStack } from '@runplane/devstack';
import { destroyBus, EventLog } from '@runplane/eventlog';
import { SHARED_NATS, SUITE_NATS, suiteNatsConfig } from '../../../test/support/nats-server.js';

const dir = mkdtempSync(join(tmpdir(), 'rp-stack-start-'));
const tag = randomBytes(4).toString('hex');
/** A PostgreSQL that accepts connections and never answers. */
let silent: Server;
const sockets = new Set<Socket>();

beforeAll(async () => {
  silent = createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => silent.close(r));
  rmSync(dir, { recursive: true, force: true });
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('a nats-server that does not answer', () => {
  it('fails the start naming nats-server, within the 1 s it is given, and is stopped', async () => {
    const pidFile = join(dir, 'fake-nats.pid');
    const fake = join(dir, 'nats-server');
    // answers --version as a supported release, then runs and never listens
    writeFileSync(fake, `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "nats-server: v2.15.1"; exit 0; fi\necho $$ > ${pidFile}\nexec sleep 600\n`);
    chmodSync(fake, 0o755);
    const before = process.env.RUNPLANE_NATS_SERVER_BIN;
    process.env.RUNPLANE_NATS_SERVER_BIN = fake;
    const at = Date.now();
    try {
      // 1 s, not the default 10 (NATS_READY_TIMEOUT_MS): the same wait, waited out for less
      await expect(
        startSecuredNats({ stateDir: join(dir, 'state'), space: { stream: 'RP_FAKE', prefix: 'fake', partitions: 1 }, readyTimeoutMs: 1_000 }),
      ).rejects.toThrow(/^nats-server failed to start: .*nats-server did not answer within 1 s at nats:\/\/127\.0\.0\.1:\d+ \(log: /);
    } finally {
      if (before === undefined) delete process.env.RUNPLANE_NATS_SERVER_BIN;
      else process.env.RUNPLANE_NATS_SERVER_BIN = before;
    }
    process.stdout.write(`STACK-START | nats-server not answering: rejected after ${Date.now() - at} ms\n`);
    // it waited the bound out (the fake never answers), and not much longer
    expect(Date.now() - at).toBeGreaterThanOrEqual(1_000);
    expect(Date.now() - at).toBeLessThan(11_000);
    expect(alive(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
    expect(runningProcesses()).toEqual([]);
  }, 60_000);
});

describe('a nats-server port another process took first', () => {
  it('starts the server on another port, the clash in its log (a free port can be taken between the look and the bind)', async () => {
    // the port the start looks at first is held by another process, as when a test beside it took it
    const holder = createServer((s) => s.destroy());
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
    const taken = (holder.address() as { port: number }).port;
    const stateDir = join(dir, 'clash');
    try {
      const nats = await startSecuredNats({ stateDir, space: { stream: `RPTEST_CLASH_${tag}`, prefix: `tcl${tag}`, partitions: 1 }, port: taken });
      try {
        expect(nats.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
        expect(new URL(nats.url).port).not.toBe(String(taken));
        expect(nats.child?.exitCode).toBeNull();
        // the first attempt did meet the held port
        expect(readFileSync(join(stateDir, 'nats', 'server.log'), 'utf8')).toMatch(new RegExp(`${taken}.*address already in use`));
      } finally {
        await nats.stop();
      }
    } finally {
      await new Promise((r) => holder.close(r));
    }
  }, 60_000);

  it('starts a whole cluster on other ports when a cluster port chosen for one node was taken', async () => {
    const holder = createServer((s) => s.destroy());
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
    const taken = (holder.address() as { port: number }).port;
    const free: number[] = [];
    while (free.length < 5) {
      const p = await getPort({ host: '127.0.0.1' });
      if (p !== taken && !free.includes(p)) free.push(p);
    }
    // n2's cluster (route) port is the held one
    const ports = [free[0]!, free[1]!, free[2]!, taken, free[3]!, free[4]!];
    try {
      const cluster = await startNatsCluster({
        nodes: 3,
        stateDir: join(dir, 'cluster-clash'),
        config: suiteNatsConfig(),
        auth: SUITE_NATS,
        root: repoRoot(),
        ports,
      });
      try {
        // it resolved: every node answers JetStream requests, so the cluster has its meta leader
        expect(cluster.nodes).toHaveLength(3);
        expect(cluster.nodes.flatMap((n) => [n.clientPort, n.clusterPort])).not.toContain(taken);
        expect(cluster.nodes.every((n) => n.pid !== null)).toBe(true);
        // the first attempt did meet the held port, on n2
        expect(readFileSync(cluster.nodes[1]!.logFile, 'utf8')).toMatch(new RegExp(`${taken}.*address already in use`));
      } finally {
        await cluster.stop();
      }
    } finally {
      await new Promise((r) => holder.close(r));
    }
  }, 90_000);
});

describe('a stack whose service exits at start-up while another one hangs', () => {
  it('rejects at once naming the service that exited, and stops every process it started', async () => {
    const stream = `RPTEST_START_${tag}`;
    const prefix = `tst${tag}`;
    const { port } = silent.address() as { port: number };
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      RUNPLANE_STREAM: stream,
      RUNPLANE_SUBJECT_PREFIX: prefix,
      // the projector waits for this PostgreSQL for ever (a start that hangs)
      DATABASE_URL: `postgresql://postgres@127.0.0.1:${port}/rp_silent`,
      // tools refuses it at start-up (1..64)
      RUNPLANE_TOOL_THREADS: '0',
    };
    const at = Date.now();
    let error: unknown;
    try {
      await startStack({ env, logDir: join(dir, 'logs') });
    } catch (e) {
      error = e;
    }
    const ms = Date.now() - at;
    process.stdout.write(`STACK-START | tools exits, projector hangs: rejected after ${ms} ms: ${String(error).split('\n')[0]}\n`);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/^tools exited \(1\) before it was ready:\n/);
    expect((error as Error).message).toContain('tools failed to start: Invalid configuration: RUNPLANE_TOOL_THREADS');
    // far below the 60 s a process has to become ready
    expect(ms).toBeLessThan(40_000);
    expect(runningProcesses()).toEqual([]);
    const log = await EventLog.connect({ ...SHARED_NATS, stream, prefix });
    await destroyBus(log);
    await log.destroyStream();
    await log.close();
  }, 120_000);
});
