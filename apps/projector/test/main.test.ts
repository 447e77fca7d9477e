import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { EventLog } from '@runplane/eventlog';
import { databaseUrlWith, dropDatabase } from '@runplane/projections';
import { uniqueTag } from '../../../libs/projections/test/fixtures.js';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';

// the projector's partition consumers need the current server (multi-filter 2.10, pinned priority groups 2.11)
const current = currentNatsServerBinary();
let server: TestNatsServer;
let natsUrl: string;
const adminUrl = process.env.PROJECTIONS_TEST_ADMIN_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const tag = uniqueTag();
const stream = `RPTEST_PROJMAIN_${tag}`;
const prefix = `tpm${tag}`;
const db = `rp_test_projmain_${tag}`;
// tsc's output, not the bundle (which every end-to-end stack starts): the one test that runs a service
// as `node dist/main.js` (the package's `start`, docs/operations.md), its heartbeat worker found beside
// the module rather than beside a bundle
const entry = fileURLToPath(new URL('../dist/main.js', import.meta.url));

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: current.bin });
  natsUrl = server.url;
});
afterAll(async () => {
  await dropDatabase(adminUrl, db);
  const log = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream, prefix });
  await log.destroyStream();
  await log.close();
  await server.cleanup();
});

describe('process entry (dist/main.js, built by tsc -b)', () => {
  it('prints "projector ready", serves /healthz, and exits 0 on SIGTERM', async () => {
    const child = spawn(process.execPath, [entry], {
      env: {
        ...process.env,
        NODE_OPTIONS: '',
        NATS_URL: natsUrl,
        RUNPLANE_STREAM: stream,
        RUNPLANE_SUBJECT_PREFIX: prefix,
        DATABASE_URL: databaseUrlWith(adminUrl, db),
        PROJECTOR_PORT: '0',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready line; stdout=${stdout} stderr=${stderr}`)), 20_000);
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
        const m = /^projector ready on (http:\/\/\S+)$/m.exec(stdout);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      void exited.then(() => reject(new Error(`exited before ready: ${stderr}`)));
    });
    expect(stdout.split('\n').filter((l) => l.includes('projector ready'))).toHaveLength(1);
    const res = await fetch(`${url}/healthz`);
    expect(res.status).toBe(200);
    child.kill('SIGTERM');
    expect(await exited).toEqual({ code: 0, signal: null });
  });
});
