#!/usr/bin/env node
/**
 * `node apps/cli/dist/provision-main.js`: `runplane provision` without the rest of the CLI (the
 * Kubernetes provisioning Job runs it in the production image). Exit code 0 when everything
 * exists, 1 with the reason on stderr otherwise.
 */
import { provision } from './provision.js';

try {
  process.exitCode = await provision();
} catch (e) {
  process.stderr.write(`runplane provision: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
}
