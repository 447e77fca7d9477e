/**
 * Scenario files: a JSON script of what the scripted model answers to each chat request.
 *
 * ```json
 * { "steps": [
 *     { "reply": { "content": "Hi", "finishReason": "stop" }, "chunkDelayMs": 20 },
 *     { "reply": { "content": "One.\n\nTwo." }, "paragraphDelayMs": 3000 },
 *     { "reply": { "toolCalls": [{ "name": "list_funds", "arguments": {} }] } },
 *     { "error": { "status": 500, "message": "boom" }, "delayMs": 100 },
 *     { "hang": true },
 *     { "rawChunks": [{ "delta": { "tool_calls": [{ "index": 0, "id": "a", "function": { "name": "list_funds", "arguments": {} } }] } },
 *                     { "finishReason": "tool_calls" }] } ],
 *   "then": "research-policy" }
 * ```
 * Step i answers the i-th well-formed chat request (a request rejected with 400 takes no step).
 * After the steps run out, `then` decides: `research-policy` (default) answers with the offline
 * research policy, `error` answers 500 `scenario_exhausted`, `repeat-last` repeats the last step
 * forever. An error step may carry `retryAfter` (sent as the `Retry-After` header: a rate limit
 * `{ "error": { "status": 429, "message": "slow down", "retryAfter": 1 } }`); an empty reply is
 * `{ "reply": { "content": "" } }`; a very long reply is `content` sent `repeatContent` times.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { Reply } from './wire.js';

const NonNegativeMs = z.number().int().min(0).max(3_600_000);
const TokenCount = z.number().int().min(0);

/** Token counts for a reply, camelCase or OpenAI snake_case; missing ones are estimated. */
export const ScenarioUsage = z
  .object({
    promptTokens: TokenCount.optional(),
    completionTokens: TokenCount.optional(),
    totalTokens: TokenCount.optional(),
    prompt_tokens: TokenCount.optional(),
    completion_tokens: TokenCount.optional(),
    total_tokens: TokenCount.optional(),
  })
  .strict()
  .transform((u) => {
    const out: { promptTokens?: number; completionTokens?: number; totalTokens?: number } = {};
    const prompt = u.promptTokens ?? u.prompt_tokens;
    const completion = u.completionTokens ?? u.completion_tokens;
    const total = u.totalTokens ?? u.total_tokens;
    if (prompt !== undefined) out.promptTokens = prompt;
    if (completion !== undefined) out.completionTokens = completion;
    if (total !== undefined) out.totalTokens = total;
    return out;
  });

/** One tool call; `arguments` as an object is JSON-encoded, as a string is sent verbatim (e.g. to script malformed JSON). */
export const ScenarioToolCall = z
  .object({
    id: z.string().min(1).optional(),
    name: z.string().min(1),
    arguments: z.union([z.record(z.string(), z.unknown()), z.string()]),
  })
  .strict();

export const ScenarioReply = z
  .object({
    content: z.string().optional(),
    /**
     * Sends `content` this many times in a row (default 1): a reply of several megabytes without a
     * scenario of that size (e.g. `"content": "<a paragraph>\n\n", "repeatContent": 20000`).
     */
    repeatContent: z.number().int().min(1).max(1_000_000).optional(),
    toolCalls: z.array(ScenarioToolCall).optional(),
    finishReason: z.enum(['stop', 'length', 'tool_calls']).optional(),
    usage: ScenarioUsage.optional(),
  })
  .strict();

export const ScenarioError = z
  .object({
    status: z.number().int().min(400).max(599),
    message: z.string(),
    type: z.string().min(1).optional(),
    /** A `Retry-After` header to send with it (a rate limit, 429, or 503): delta-seconds or an HTTP date, verbatim. */
    retryAfter: z.union([z.number().int().min(0), z.string().min(1)]).optional(),
  })
  .strict();

/**
 * One raw stream chunk, sent verbatim inside the chunk envelope (id, model, created): `delta` is
 * `choices[0].delta` exactly as written (a repeated function name, two calls under one index,
 * arguments as an object: the malformed streams real providers send), `finishReason` its
 * `finish_reason`, `usage` the chunk's `usage` (then `choices` is empty).
 */
export const RawChunk = z
  .object({
    delta: z.record(z.string(), z.unknown()).optional(),
    finishReason: z.string().nullable().optional(),
    usage: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();
export type RawChunk = z.infer<typeof RawChunk>;

const StepTiming = {
  /** Milliseconds to wait before the first byte of the answer. */
  delayMs: NonNegativeMs.optional(),
  /** Milliseconds to wait between stream chunks (streaming requests only). */
  chunkDelayMs: NonNegativeMs.optional(),
  /** Milliseconds to wait after each paragraph of the content, i.e. after a chunk that completes a blank-line separator (streaming requests only). */
  paragraphDelayMs: NonNegativeMs.optional(),
};

export const ScenarioStep = z
  .object({
    reply: ScenarioReply.optional(),
    error: ScenarioError.optional(),
    hang: z.literal(true).optional(),
    /** A raw chunk script for a streaming request (a non-streaming request gets 400). */
    rawChunks: z.array(RawChunk).min(1).optional(),
    ...StepTiming,
  })
  .strict()
  .refine((s) => [s.reply, s.error, s.hang, s.rawChunks].filter((x) => x !== undefined).length === 1, {
    message: 'a step needs exactly one of "reply", "error", "hang": true or "rawChunks"',
  });

/** A scenario: the steps in request order and what happens after them. */
export const Scenario = z
  .object({
    steps: z.array(ScenarioStep),
    /** After the steps: the research policy, a 500 `scenario_exhausted`, or the last step again, forever (`repeat-last`: e.g. a 429 that never ends). */
    then: z.enum(['research-policy', 'error', 'repeat-last']).default('research-policy'),
  })
  .strict();
export type Scenario = z.output<typeof Scenario>;
/** A scenario as written in a file (`then` optional). */
export type ScenarioInput = z.input<typeof Scenario>;
export type ScenarioStep = z.output<typeof ScenarioStep>;

/** A scenario file or object that cannot be used; `message` says which file and what is wrong. */
export class ScenarioFileError extends Error {
  override readonly name = 'ScenarioFileError';
}

/**
 * Validates a scenario object.
 * @throws ScenarioFileError listing every problem with its path (e.g. `steps[1].reply.finishReason`).
 */
export function parseScenario(value: unknown, source = 'scenario'): Scenario {
  const parsed = Scenario.safeParse(value);
  if (!parsed.success) throw new ScenarioFileError(`${source} is not a valid scenario:\n${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

/**
 * Reads and validates a scenario JSON file.
 * @throws ScenarioFileError when the file cannot be read, is not JSON, or does not match {@link Scenario}.
 */
export async function loadScenarioFile(path: string): Promise<Scenario> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw new ScenarioFileError(`scenario file ${path} cannot be read: ${(e as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ScenarioFileError(`scenario file ${path} is not valid JSON: ${(e as Error).message}`);
  }
  return parseScenario(json, `scenario file ${path}`);
}

/** What the server does for one chat request. */
export type StepAction =
  | { kind: 'reply'; reply: Reply; delayMs: number; chunkDelayMs: number; paragraphDelayMs: number }
  | { kind: 'error'; status: number; message: string; type?: string; retryAfter?: number | string; delayMs: number }
  | { kind: 'hang'; delayMs: number }
  | { kind: 'raw'; chunks: RawChunk[]; delayMs: number; chunkDelayMs: number }
  | { kind: 'policy' };

/**
 * The action for the chat request with 0-based index `index`: the scenario step, or after the
 * steps run out `policy` (then = research-policy) or a 500 `scenario_exhausted` error (then = error).
 */
export function actionFor(scenario: Scenario, index: number): StepAction {
  const step = scenario.steps[index] ?? (scenario.then === 'repeat-last' ? scenario.steps[scenario.steps.length - 1] : undefined);
  if (step === undefined) {
    return scenario.then === 'error'
      ? {
          kind: 'error',
          status: 500,
          type: 'scenario_exhausted',
          message: `scenario has ${scenario.steps.length} steps; request ${index + 1} has none`,
          delayMs: 0,
        }
      : { kind: 'policy' };
  }
  const delayMs = step.delayMs ?? 0;
  if (step.reply) {
    const { repeatContent, ...reply } = step.reply;
    if (repeatContent !== undefined && reply.content !== undefined) reply.content = reply.content.repeat(repeatContent);
    return { kind: 'reply', reply, delayMs, chunkDelayMs: step.chunkDelayMs ?? 0, paragraphDelayMs: step.paragraphDelayMs ?? 0 };
  }
  if (step.error) return { kind: 'error', ...step.error, delayMs };
  if (step.rawChunks) return { kind: 'raw', chunks: step.rawChunks, delayMs, chunkDelayMs: step.chunkDelayMs ?? 0 };
  return { kind: 'hang', delayMs };
}
