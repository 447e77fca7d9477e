#!/usr/bin/env node
/** `runplane`: runs the command named on the command line (program.ts; `runplane --help` lists them). */
import { program } from './program.js';

// `runplane timeline <id> | head`: a closed pipe ends the command quietly
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(0);
  throw e;
});

await program.parseAsync(process.argv);
