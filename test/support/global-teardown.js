// Jest global tear-down: stops the suite's shared nats-server (test/support/global-setup.js) and
// removes its store.
import { rmSync } from 'node:fs';

export default async function globalTeardown() {
  const shared = globalThis.__RUNPLANE_SHARED_NATS__;
  if (!shared) return;
  const { child, watchdog, dir } = shared;
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }
  watchdog.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
