/**
 * The conversation as the scripted research policy reads it: the last question and the tool calls made since it, each with its outcome. Pure.
 */
import { ToolMessageContent } from '@runplane/contracts';
import { followUp } from './question.js';
import { type WireMessage, contentText } from './wire.js';

/** How one tool call of the current turn ended, as the tool message reports it. */
export type CallOutcome =
  | { status: 'succeeded'; result: unknown }
  | { status: 'failed' | 'denied' | 'unknown'; error: { code: string; message: string } }
  /** No tool message answers this call. */
  | { status: 'missing' }
  /**
   * The runtime narrowed the tool message to an excerpt to fit the context budget (apps/runtime
   * messages.ts: `{ narrowed: { shownCharacters, totalCharacters, ... }, excerpt }`): the result
   * came back, but the model was shown only its first characters.
   */
  | { status: 'narrowed'; shown: number; total: number }
  /** The tool message is not a {@link ToolMessageContent} JSON. */
  | { status: 'unreadable'; text: string };

export interface CallRecord {
  id: string;
  name: string;
  args: Record<string, unknown>;
  outcome: CallOutcome;
}

/** The text of the last user message ('' when there is none). */
export function lastQuestion(messages: readonly WireMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role === 'user') return contentText(m.content);
  }
  return '';
}

/**
 * The request this Run follows up, when the runtime carried one: a continuation's original request
 * (`[continuation, historical] ... Its original request (...; quoted): "..."`) or a clarification's
 * (`[clarification, historical] The original request (quoted): "..."`), as the runtime's context
 * messages quote it (JSON string). Null when there is none or it cannot be read.
 */
export function earlierRequest(messages: readonly WireMessage[]): string | null {
  for (const m of messages) {
    if (m.role !== 'system') continue;
    const text = contentText(m.content);
    const quoted = /^\[(?:continuation|clarification), historical\][^"]*original request[^"]*?: ("(?:[^"\\]|\\.)*")/.exec(text)?.[1];
    if (!quoted) continue;
    try {
      const request: unknown = JSON.parse(quoted);
      if (typeof request === 'string' && request.trim()) return request;
    } catch {
      // not a quote the runtime wrote: not a request to follow up
    }
  }
  return null;
}

/**
 * The request the current turn answers: the last user message, read together with the request it
 * follows up when it points back at it or names no fund (question.ts {@link followUp}): `please
 * finish` after an interrupted Run is that Run's request again, `Now compare it with QQQ` compares
 * QQQ with the funds asked before. A message of its own (`What does IVV hold?`) stands alone.
 */
export function currentRequest(messages: readonly WireMessage[]): string {
  const current = lastQuestion(messages);
  const earlier = earlierRequest(messages);
  return earlier === null ? current : followUp(current, earlier);
}

export function parseArgs(s: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(s);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export function parseOutcome(text: string): CallOutcome {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { status: 'unreadable', text };
  }
  const parsed = ToolMessageContent.safeParse(json);
  if (parsed.success) return parsed.data;
  const narrowed = (json as { narrowed?: { shownCharacters?: unknown; totalCharacters?: unknown } } | null)?.narrowed;
  if (narrowed && typeof narrowed.shownCharacters === 'number' && typeof narrowed.totalCharacters === 'number')
    return { status: 'narrowed', shown: narrowed.shownCharacters, total: narrowed.totalCharacters };
  return { status: 'unreadable', text };
}

/**
 * The tool calls the assistant made since the last user message, in order, each with the outcome
 * its tool message reports (`missing` when no tool message answers it).
 */
export function currentTurnCalls(messages: readonly WireMessage[]): CallRecord[] {
  let start = 0;
  messages.forEach((m, i) => {
    if (m.role === 'user') start = i + 1;
  });
  const turn = messages.slice(start);
  const results = new Map<string, string>();
  for (const m of turn) if (m.role === 'tool') results.set(m.tool_call_id, contentText(m.content));
  const calls: CallRecord[] = [];
  for (const m of turn) {
    if (m.role !== 'assistant') continue;
    for (const c of m.tool_calls ?? []) {
      const text = results.get(c.id);
      calls.push({
        id: c.id,
        name: c.function.name,
        args: parseArgs(c.function.arguments),
        outcome: text === undefined ? { status: 'missing' } : parseOutcome(text),
      });
    }
  }
  return calls;
}
