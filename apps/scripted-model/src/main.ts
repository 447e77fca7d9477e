#!/usr/bin/env node
/**
 * CLI: `node apps/scripted-model/dist/main.js [--port 0] [--host 127.0.0.1] [--scenario file.json]`.
 * Prints exactly one stdout line, `scripted-model listening on http://HOST:PORT/v1`, once ready;
 * errors go to stderr with exit code 1 (2 for a bad scenario file). Stops on SIGTERM/SIGINT.
 */
import { Command, InvalidArgumentError } from 'commander';
import { loadScenarioFile, ScenarioFileError } from './scenario.js';
import { startScriptedModel } from './server.js';

function parsePort(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('port must be an integer 0-65535');
  return n;
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('scripted-model')
    .description('OpenAI-compatible scripted model server (scenario steps, then the offline research policy).')
    .option('--port <port>', 'TCP port, 0 = any free port', parsePort, 0)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--scenario <file>', 'scenario JSON file (default: the research policy answers everything)')
    .parse(argv);
  const opts = program.opts<{ port: number; host: string; scenario?: string }>();

  const scenario = opts.scenario ? await loadScenarioFile(opts.scenario) : undefined;
  const model = await startScriptedModel({ port: opts.port, host: opts.host, ...(scenario && { scenario }) });
  process.stdout.write(`scripted-model listening on ${model.url}\n`);

  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    model.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main(process.argv).catch((e: unknown) => {
  process.stderr.write(`scripted-model: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(e instanceof ScenarioFileError ? 2 : 1);
});
