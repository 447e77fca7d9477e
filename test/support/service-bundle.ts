/**
 * One service's bundle (`apps/<service>/dist/main.bundle.js`, what a deployment runs) started as a
 * child process against a private nats-server, as the service's own NATS user: for tests of what a
 * service does at start-up (a refused consumer, a stream not provisioned yet).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Where a started bundle is and what it has printed so far. */
export interface StartedBundle {
  proc: ChildProcess;
  out: { stdout: string; stderr: string; exit: number | null };
  /** Resolves when `seen()` holds on the output; rejects after `ms` (default 30 s) or when the process exits first. */
  until(what: string, seen: () => boolean, ms?: number): Promise<void>;
}

/**
 * Starts `service`'s bundle on `natsUrl` as `user` (no TLS, no signing: the suite's own CA and keys
 * are taken out of the environment), port 0, the start-up collection off; `env` adds or overrides.
 */
export function startServiceBundle(
  service: string,
  natsUrl: string,
  user: { user: string; password: string },
  space: { stream: string; prefix: string; partitions: number },
  env: NodeJS.ProcessEnv = {},
): StartedBundle {
  const main = fileURLToPath(new URL(`../../apps/${service}/dist/main.bundle.js`, import.meta.url));
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    NATS_URL: natsUrl,
    NATS_USER: user.user,
    NATS_PASSWORD: user.password,
    RUNPLANE_STREAM: space.stream,
    RUNPLANE_SUBJECT_PREFIX: space.prefix,
    RUNPLANE_PARTITIONS: String(space.partitions),
    [`${service.toUpperCase()}_PORT`]: '0',
    RUNPLANE_STARTUP_COLLECTION: 'false',
    ...env,
  };
  for (const name of ['NATS_CA_FILE', 'RUNPLANE_SIGNING_KEY_FILE', 'RUNPLANE_SIGNING_PUBLIC_KEYS_FILE']) if (!(name in env)) delete childEnv[name];
  const proc = spawn(process.execPath, [main], { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '', exit: null as number | null };
  const waiters: (() => void)[] = [];
  const wake = () => waiters.splice(0).forEach((w) => w());
  proc.stdout.on('data', (d: Buffer) => ((out.stdout += d.toString()), wake()));
  proc.stderr.on('data', (d: Buffer) => ((out.stderr += d.toString()), wake()));
  proc.once('exit', (c) => ((out.exit = c ?? -1), wake()));
  const until = (what: string, seen: () => boolean, ms = 30_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms; stdout:\n${out.stdout}\nstderr:\n${out.stderr}`)), ms);
      const check = () => {
        if (seen()) return (clearTimeout(timer), resolve());
        if (out.exit !== null) return (clearTimeout(timer), reject(new Error(`exited ${out.exit} before ${what}; stderr:\n${out.stderr}`)));
        waiters.push(check);
      };
      check();
    });
  return { proc, out, until };
}
