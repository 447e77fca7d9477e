/**
 * The slice of the OpenAI chat-completions wire format the scripted model reads and writes:
 * zod schemas for request bodies, and pure builders for non-streaming responses and SSE chunks.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';

// ---- request ----------------------------------------------------------------------------------

const TextPart = z.object({ type: z.literal('text'), text: z.string() }).loose();
/** Any content part (text, image_url, input_audio, file...): only text parts are read. */
const ContentPart = z.object({ type: z.string() }).loose();

export const WireToolCall = z
  .object({
    id: z.string(),
    type: z.literal('function'),
    function: z.object({ name: z.string(), arguments: z.string() }).loose(),
  })
  .loose();
export type WireToolCall = z.infer<typeof WireToolCall>;

export const WireMessage = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: z.union([z.string(), z.array(TextPart)]) }).loose(),
  z.object({ role: z.literal('developer'), content: z.union([z.string(), z.array(TextPart)]) }).loose(),
  z.object({ role: z.literal('user'), content: z.union([z.string(), z.array(ContentPart)]) }).loose(),
  z
    .object({
      role: z.literal('assistant'),
      content: z.union([z.string(), z.array(ContentPart), z.null()]).optional(),
      tool_calls: z.array(WireToolCall).optional(),
    })
    .loose(),
  z
    .object({
      role: z.literal('tool'),
      tool_call_id: z.string(),
      content: z.union([z.string(), z.array(TextPart)]),
    })
    .loose(),
]);
export type WireMessage = z.infer<typeof WireMessage>;

export const WireTool = z
  .object({
    type: z.literal('function'),
    function: z
      .object({
        name: z.string().min(1),
        description: z.string().optional(),
        parameters: z.record(z.string(), z.unknown()).optional(),
      })
      .loose(),
  })
  .loose();
export type WireTool = z.infer<typeof WireTool>;

/**
 * The real API's pairing rule for tool messages, checked as strictly as it does: every
 * `tool_call_id` of an assistant message with `tool_calls` must be answered by a `tool` message
 * in the run of tool messages right after it, and every `tool` message must answer a call of that
 * preceding assistant message.
 * @returns the error message the real API gives (HTTP 400, `invalid_request_error`), or null when the messages pair up.
 */
export function toolPairingError(messages: readonly WireMessage[]): string | null {
  let pending: Set<string> | null = null;
  const unanswered = (ids: Set<string>) =>
    `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...ids].join(', ')}`;
  for (const [i, m] of messages.entries()) {
    if (m.role === 'tool') {
      if (!pending)
        return `Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[${i}]).`;
      if (!pending.has(m.tool_call_id)) {
        return `Invalid parameter: messages[${i}] has tool_call_id '${m.tool_call_id}', which is not a call of the preceding assistant message (or was answered already).`;
      }
      pending.delete(m.tool_call_id);
      continue;
    }
    if (pending && pending.size > 0) return unanswered(pending);
    pending = m.role === 'assistant' && m.tool_calls && m.tool_calls.length > 0 ? new Set(m.tool_calls.map((c) => c.id)) : null;
  }
  return pending && pending.size > 0 ? unanswered(pending) : null;
}

/** A chat-completions request body. Fields the scripted model ignores are let through. */
export const ChatCompletionRequest = z
  .object({
    model: z.string().min(1),
    messages: z.array(WireMessage).min(1),
    tools: z.array(WireTool).optional(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().optional() }).loose().nullish(),
    /** OpenAI's end-user id; the scripted model matches it against scenario keys. */
    user: z.string().nullish(),
  })
  .loose();
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** The text of a message's content (string, or the text parts of an array), '' for none. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p: unknown) =>
      p !== null && typeof p === 'object' && (p as { type?: unknown }).type === 'text' && typeof (p as { text?: unknown }).text === 'string'
        ? (p as { text: string }).text
        : '',
    )
    .join('');
}

// ---- reply ------------------------------------------------------------------------------------

export type FinishReason = 'stop' | 'length' | 'tool_calls';

/** One tool call the model makes. `arguments` as an object is JSON-encoded; a string goes out as is. */
export interface ReplyToolCall {
  id?: string;
  name: string;
  arguments: Record<string, unknown> | string;
}

/** Token counts; missing fields are estimated (see {@link estimateUsage}). */
export interface UsageOverride {
  promptTokens?: number;
  completionTokens?: number;
  totalTokens?: number;
}

/** What the model answers to one request, before it is put on the wire. */
export interface Reply {
  content?: string;
  toolCalls?: ReplyToolCall[];
  /** Default: `tool_calls` when there are tool calls, else `stop`. */
  finishReason?: FinishReason;
  usage?: UsageOverride;
}

interface WireUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** A reply with ids, encoded arguments, finish reason and usage settled: what both wire forms carry. */
export interface ResolvedReply {
  id: string;
  created: number;
  model: string;
  content: string | null;
  toolCalls: Array<{ id: string; name: string; arguments: string }>;
  finishReason: FinishReason;
  usage: WireUsage;
}

/** ceil(chars / 4): the deterministic token estimate used when a scenario gives no usage. */
export function estimateTokens(chars: number): number {
  return Math.ceil(chars / 4);
}

/**
 * Usage numbers for a reply: the override where given, else chars/4 of the request messages
 * (prompt) and of the content plus tool-call names and arguments (completion); total = sum.
 */
function estimateUsage(
  request: Pick<ChatCompletionRequest, 'messages' | 'tools'>,
  content: string | null,
  toolCalls: ReadonlyArray<{ name: string; arguments: string }>,
  override: UsageOverride = {},
): WireUsage {
  const promptChars = JSON.stringify(request.messages).length + (request.tools ? JSON.stringify(request.tools).length : 0);
  const completionChars = (content ?? '').length + toolCalls.reduce((n, c) => n + c.name.length + c.arguments.length, 0);
  const prompt_tokens = override.promptTokens ?? estimateTokens(promptChars);
  const completion_tokens = override.completionTokens ?? estimateTokens(completionChars);
  return { prompt_tokens, completion_tokens, total_tokens: override.totalTokens ?? prompt_tokens + completion_tokens };
}

function shortHash(...parts: string[]): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\u0000');
  return h.digest('hex').slice(0, 24);
}

/**
 * Settles a reply against the request it answers. Ids are derived from a hash of the request
 * messages (plus the request's sequence number for the completion id), so the same conversation
 * state always yields the same tool-call ids.
 */
export function resolveReply(
  reply: Reply,
  request: Pick<ChatCompletionRequest, 'model' | 'messages' | 'tools'>,
  sequence: number,
  now: Date = new Date(),
): ResolvedReply {
  const messagesKey = JSON.stringify(request.messages);
  const toolCalls = (reply.toolCalls ?? []).map((c, i) => ({
    id: c.id ?? `call_${shortHash(messagesKey, String(i), c.name)}`,
    name: c.name,
    arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments),
  }));
  const content = reply.content ?? null;
  return {
    id: `chatcmpl-${shortHash(messagesKey, String(sequence))}`,
    created: Math.floor(now.getTime() / 1000),
    model: request.model,
    content,
    toolCalls,
    finishReason: reply.finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop'),
    usage: estimateUsage(request, content, toolCalls, reply.usage),
  };
}

/** The non-streaming `chat.completion` JSON body for a resolved reply. */
export function completionBody(r: ResolvedReply): Record<string, unknown> {
  const message: Record<string, unknown> = { role: 'assistant', content: r.content, refusal: null };
  if (r.toolCalls.length > 0) {
    message.tool_calls = r.toolCalls.map((c) => ({
      id: c.id,
      type: 'function',
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return {
    id: r.id,
    object: 'chat.completion',
    created: r.created,
    model: r.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: r.finishReason }],
    usage: r.usage,
  };
}

/**
 * Splits text into consecutive pieces of about `size` characters, cut after whitespace where
 * possible; joining the pieces gives the text back. Empty text gives no pieces.
 */
function splitText(text: string, size = 32): string[] {
  const pieces: string[] = [];
  let rest = text;
  while (rest.length > size) {
    const window = rest.slice(0, size);
    const cut = Math.max(window.lastIndexOf(' '), window.lastIndexOf('\n'));
    const at = cut > 0 ? cut + 1 : size;
    pieces.push(rest.slice(0, at));
    rest = rest.slice(at);
  }
  if (rest.length > 0) pieces.push(rest);
  return pieces;
}

/**
 * Cuts text just after each blank-line paragraph separator, so that a chunk never carries the end
 * of one paragraph and the start of the next; joining the pieces gives the text back.
 */
function paragraphPieces(text: string): string[] {
  const pieces: string[] = [];
  let from = 0;
  for (const m of text.matchAll(/\r?\n[ \t]*\r?\n/g)) {
    const end = m.index + m[0].length;
    pieces.push(text.slice(from, end));
    from = end;
  }
  if (from < text.length) pieces.push(text.slice(from));
  return pieces;
}

/** Splits a string into `n` (or fewer, when it is short) non-empty fragments of similar length. */
function fragments(s: string, n = 3): string[] {
  if (s.length === 0) return [];
  const size = Math.max(1, Math.ceil(s.length / n));
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

/**
 * The `chat.completion.chunk` objects of a streamed reply, in order: a role delta, content deltas
 * in several chunks, per tool call a delta with index/id/name then argument fragments, a chunk
 * with the finish reason, and, when `includeUsage`, a usage chunk with `choices: []`. The
 * `data: [DONE]` sentinel is not a chunk and is left to the caller.
 */
export function streamChunks(r: ResolvedReply, includeUsage: boolean): Array<Record<string, unknown>> {
  const base = { id: r.id, object: 'chat.completion.chunk', created: r.created, model: r.model };
  const extra = includeUsage ? { usage: null } : {};
  const chunk = (delta: Record<string, unknown>, finish: FinishReason | null = null) => ({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...extra,
  });
  const chunks: Array<Record<string, unknown>> = [chunk({ role: 'assistant', content: '', refusal: null })];
  for (const paragraph of paragraphPieces(r.content ?? '')) for (const piece of splitText(paragraph)) chunks.push(chunk({ content: piece }));
  r.toolCalls.forEach((c, index) => {
    chunks.push(chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] }));
    for (const f of fragments(c.arguments)) chunks.push(chunk({ tool_calls: [{ index, function: { arguments: f } }] }));
  });
  chunks.push(chunk({}, r.finishReason));
  if (includeUsage) chunks.push({ ...base, choices: [], usage: r.usage });
  return chunks;
}

/**
 * A raw scripted chunk in its envelope: `choices[0].delta` exactly as scripted (no validation:
 * malformed on purpose), or, for a usage chunk, `choices: []` and the usage as written.
 */
export function rawChunkBody(
  raw: { delta?: Record<string, unknown>; finishReason?: string | null; usage?: Record<string, unknown> },
  sequence: number,
  model: string,
): Record<string, unknown> {
  const base = { id: `chatcmpl-raw-${sequence}`, object: 'chat.completion.chunk', created: 0, model };
  if (raw.usage && !raw.delta && raw.finishReason === undefined) return { ...base, choices: [], usage: raw.usage };
  return {
    ...base,
    choices: [{ index: 0, delta: raw.delta ?? {}, logprobs: null, finish_reason: raw.finishReason ?? null }],
    ...(raw.usage && { usage: raw.usage }),
  };
}

/** The `{error:{message,type}}` body of an error response. */
export function errorBody(message: string, type: string, code: string | null = null): Record<string, unknown> {
  return { error: { message, type, param: null, code } };
}

/** The OpenAI error `type` conventionally used for an HTTP status. */
export function errorTypeFor(status: number): string {
  if (status === 400 || status === 404 || status === 405 || status === 413 || status === 422) return 'invalid_request_error';
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  return 'server_error';
}
