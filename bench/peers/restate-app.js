// Restate peer for W1: a durable service handler `W1/run` with one ctx.run step per model turn and
// per tool call (journalled by restate-server). Serves the Restate endpoint protocol on PORT and
// prints "restate-app ready on http://HOST:PORT" once it listens.
import * as restate from '@restatedev/restate-sdk';
import { createW1, runW1 } from './w1.js';

const w1 = createW1({ modelUrl: process.env.OPENAI_BASE_URL });
const service = restate.service({
  name: 'W1',
  handlers: {
    run: async (ctx, req) => {
      const result = await runW1(w1, req.question, (name, fn) => ctx.run(name, fn));
      return { turns: result.turns, toolCalls: result.toolCalls };
    },
  },
});
const port = await restate.serve({ services: [service], port: Number(process.env.PORT) });
console.log(`restate-app ready on http://127.0.0.1:${port}`);
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
