// Starts the demo's embedded PostgreSQL (PGlite, libs/projections startEmbeddedDatabase, from its
// built dist/) in a process of its own, prints one JSON line `{ "url": ..., "migrated": [...] }` on
// stdout once it serves, and closes it when stdin ends (the test that started it stopped or died).
// PGlite's WASM starts in seconds in a plain Node process, but took about 40 s inside Jest's module
// VM on a loaded 2-core machine: the tests reach it over the PostgreSQL protocol, as the services do.
import { startEmbeddedDatabase } from '@runplane/projections';

const db = await startEmbeddedDatabase({ dataDir: 'memory://' });
process.stdout.write(`${JSON.stringify({ url: db.url, migrated: db.migrated })}\n`);
process.stdin.resume();
process.stdin.on('end', () => void db.close().then(() => process.exit(0)));
