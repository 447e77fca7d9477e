/**
 * Process entry of the projector. Prints one line `projector ready on <url>` to stdout when it
 * serves; SIGTERM/SIGINT stop the consumer (in-flight steps finish), close NATS and PostgreSQL
 * and exit 0. A start-up failure prints one line to stderr and exits 1.
 */
import { startProjector } from './app.js';

startProjector({ shutdownHooks: true }).then(
  ({ url }) => {
    process.stdout.write(`projector ready on ${url}\n`);
  },
  (e: unknown) => {
    process.stderr.write(`projector failed to start: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
