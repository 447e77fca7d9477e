/** Test fixture: the scripted research policy driven against a holdings library, as the runtime drives it. */
import { ToolPack } from '@runplane/contracts';
import { executeTool, type HoldingsLibrary, ToolFailure } from '@runplane/holdings';
import { researchPolicy, type WireMessage, type WireTool } from '../src/index.js';

/** Every tool of the research pack, as a model request offers it. */
export const PACK_TOOLS: WireTool[] = Object.entries(ToolPack).map(([name, spec]) => ({
  type: 'function',
  function: { name, description: spec.description, parameters: { type: 'object' } },
}));

/** A tool call the policy made: the tool's name and its arguments. */
export interface PolicyCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** How {@link research} runs. */
export interface ResearchOptions {
  /** The policy's clock (default: the real one). */
  now?: Date;
  /** The messages each request shows the policy, given all of them and the calls of the turns so far (default: all; a context cut narrows them). */
  view?: (messages: WireMessage[], turns: PolicyCall[][]) => WireMessage[];
  /** Messages before the question: what the runtime carries from earlier Runs (its labelled system messages). */
  context?: WireMessage[];
}

/**
 * Asks `question` and runs the policy/tool loop on `lib` for at most 5 turns: each tool call the
 * policy makes is executed with @runplane/holdings and its result sent back (`succeeded`, or
 * `failed` with the ToolFailure's code and message), as the runtime's tool messages carry them.
 * @returns the calls of each turn and the final answer's text.
 * @throws Error when there is no final answer after 5 turns; what executeTool throws other than a ToolFailure.
 */
export async function research(
  lib: HoldingsLibrary,
  question: string,
  opts: ResearchOptions = {},
): Promise<{ turns: PolicyCall[][]; answer: string }> {
  const messages: WireMessage[] = [...(opts.context ?? []), { role: 'user', content: question }];
  const turns: PolicyCall[][] = [];
  for (let t = 0; t < 5; t++) {
    const reply = researchPolicy(opts.view ? opts.view(messages, turns) : messages, PACK_TOOLS, opts.now);
    if (!reply.toolCalls) return { turns, answer: reply.content ?? '' };
    turns.push(reply.toolCalls.map((c) => ({ name: c.name, arguments: c.arguments as Record<string, unknown> })));
    const ids = reply.toolCalls.map((_, i) => `c${t}_${i}`);
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: reply.toolCalls.map((c, i) => ({
        id: ids[i]!,
        type: 'function',
        function: { name: c.name, arguments: JSON.stringify(c.arguments) },
      })),
    });
    for (const [i, c] of reply.toolCalls.entries()) {
      let content: string;
      try {
        content = JSON.stringify({ status: 'succeeded', result: await executeTool(lib, c.name, c.arguments) });
      } catch (e) {
        if (!(e instanceof ToolFailure)) throw e;
        content = JSON.stringify({ status: 'failed', error: { code: e.code, message: e.message } });
      }
      messages.push({ role: 'tool', tool_call_id: ids[i]!, content });
    }
  }
  throw new Error('no final answer in 5 turns');
}
