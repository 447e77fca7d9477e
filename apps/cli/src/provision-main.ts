#!/usr/bin/env node
/**
 * `node apps/cli/dist/provision-main.js [--downstream <names>]`: `runplane provision` without the
 * rest of the CLI (the Kubernetes provisioning Job runs it in the production image). `--downstream`:
 * the comma-separated downstream durable consumer names to create, the same list as given to
 * `runplane docs nats-auth --downstream` (default downstream-1 to downstream-4). Exit code 0 when
 * everything exists, 1 with the reason on stderr otherwise.
 */
import { DEFAULT_DOWNSTREAM_CONSUMERS, downstreamConsumerNames } from '@runplane/eventlog';
import { provision } from './provision.js';

try {
  const at = process.argv.indexOf('--downstream');
  const downstream = at > 0 ? downstreamConsumerNames((process.argv[at + 1] ?? '').split(',').map((n) => n.trim())) : DEFAULT_DOWNSTREAM_CONSUMERS;
  process.exitCode = await provision(process.env, undefined, downstream);
} catch (e) {
  process.stderr.write(`runplane provision: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
}
