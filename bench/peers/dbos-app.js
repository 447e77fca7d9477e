// DBOS peer for W1: one workflow per Run with a step per model turn and per tool call, checkpointed
// in its own PostgreSQL system database (DBOS_SYSTEM_DATABASE_URL). Serves POST /run
// {runId, question}: starts the workflow with workflowID = runId and answers with its result.
// Prints "dbos-app ready on http://HOST:PORT" once it serves.
import { createServer } from 'node:http';
import { DBOS } from '@dbos-inc/dbos-sdk';
import { createW1, runW1 } from './w1.js';

const w1 = createW1({ modelUrl: process.env.OPENAI_BASE_URL });
const workflow = DBOS.registerWorkflow(async (question) => runW1(w1, question, (name, fn) => DBOS.runStep(fn, { name })), { name: 'w1' });

DBOS.setConfig({ name: 'runplane-bench-w1', systemDatabaseUrl: process.env.DBOS_SYSTEM_DATABASE_URL, logLevel: 'warn' });
await DBOS.launch();

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    try {
      const { runId, question } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const handle = await DBOS.startWorkflow(workflow, { workflowID: runId })(question);
      const result = await handle.getResult();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ turns: result.turns, toolCalls: result.toolCalls }));
    } catch (e) {
      res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: String(e?.message ?? e) }));
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`dbos-app ready on http://127.0.0.1:${server.address().port}`));
const stop = async () => {
  server.close();
  await DBOS.shutdown().catch(() => undefined);
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
