/**
 * Assembles a streamed chat completion into exactly the turn the model sent (K5, K11), whatever
 * the provider's chunking. Pure: it sees chunks, never the network, so every variant of a
 * malformed stream is unit-tested without a server.
 *
 * Rules, for the tool-call deltas of `choices[0]`:
 * - a call is identified by its stream `index` and, when the provider sends one, its `id`: a delta
 *   at an index whose call already has a different id starts a new call (two calls sent under the
 *   same index are two calls, each with its own id and arguments, never one merged call);
 * - a function name repeated in later deltas of the same call is one name; a name sent in
 *   fragments ("get_", "holdings") is joined;
 * - `arguments` fragments that are strings are concatenated; arguments sent as a JSON object or
 *   array instead of a string are recorded as that value's JSON text when they are the call's
 *   whole arguments; mixed with string fragments, or of another type, the reply is invalid
 *   (`invalid-response`), never stored as "[object Object]";
 * - a call without a name is an invalid reply.
 * Content deltas are concatenated; the usage chunk (if any) gives the token counts; the last
 * non-null `finish_reason` is the turn's.
 *
 * The reservation (K7): given `maxOutputTokens` (the `max_tokens` the ledger reserved), a reply
 * whose output (content, tool names and arguments) passes `maxOutputTokens * CHARS_PER_TOKEN`
 * characters is cut there, as a provider that honours `max_tokens` would stop: the content is kept
 * up to the limit, the turn ends `length` (not an answer, its calls never dispatched, K9, K5), and
 * {@link TurnAssembler.overReservation} tells the caller to stop reading. Its usage is then unknown
 * (the provider's usage chunk comes last), so the ledger charges the estimate of what was kept,
 * which is at most the reservation; a provider that ignores `max_tokens` cannot run a Run past it.
 */
import { CHARS_PER_TOKEN } from '@runplane/run-facts';
import type { ModelTurnResult } from './decide.js';

/** The parts of a streamed chunk this reads (OpenAI `ChatCompletionChunk`, loosely typed: providers send malformed ones). */
export interface StreamChunk {
  choices?: Array<{
    delta?: {
      content?: unknown;
      tool_calls?: Array<{ index?: unknown; id?: unknown; function?: { name?: unknown; arguments?: unknown } | null }> | null;
    } | null;
    finish_reason?: unknown;
  }> | null;
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown; total_tokens?: unknown } | null;
}

interface CallSlot {
  index: number;
  id?: string;
  name: string;
  /** String fragments joined, or the JSON text of a whole non-string arguments value. */
  args: string;
  /** How the arguments arrived so far. */
  argsKind: 'none' | 'text' | 'json-value';
}

/** Makes a model-chosen tool call id safe as a Runplane id and unique within the Run: `t<turn>-<position>-<id>`. */
export function runToolCallId(turn: number, position: number, raw: string | undefined): string {
  const clean = (raw ?? '').replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 80);
  return `t${turn}-${position}-${clean || 'call'}`;
}

type Usage = Extract<ModelTurnResult, { ok: true }>['turn']['usage'];

/**
 * Collects the chunks of one streamed reply. `push` returns the content delta of a chunk (for
 * live observers) and records a protocol violation instead of throwing; `result` gives the turn.
 */
export class TurnAssembler {
  private content = '';
  private finishReason = '';
  private usage: Usage = null;
  /** Calls in the order they were started. */
  private readonly calls: CallSlot[] = [];
  /** The call currently receiving deltas at each stream index. */
  private readonly current = new Map<number, CallSlot>();
  private invalid: string | null = null;
  /** Output characters the reservation allows (content, tool names and arguments); infinite without one. */
  private readonly maxOutputChars: number;
  /** Output characters taken so far. */
  private outputChars = 0;
  private cut = false;

  /** @param opts.maxOutputTokens the request's `max_tokens` (the ledger's reservation, K7); none: no cut. */
  constructor(opts: { maxOutputTokens?: number | undefined } = {}) {
    this.maxOutputChars = opts.maxOutputTokens ? opts.maxOutputTokens * CHARS_PER_TOKEN : Number.POSITIVE_INFINITY;
  }

  /** True once the reply passed the reservation: it was cut there, and the caller stops reading (K7). */
  get overReservation(): boolean {
    return this.cut;
  }

  /** Takes one chunk; returns its content text ('' when none). After the cut, takes nothing more. */
  push(chunk: StreamChunk): string {
    if (this.cut) return '';
    const u = chunk.usage;
    if (u && typeof u.prompt_tokens === 'number' && typeof u.completion_tokens === 'number') {
      const total = typeof u.total_tokens === 'number' ? u.total_tokens : u.prompt_tokens + u.completion_tokens;
      this.usage = { promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens, totalTokens: total };
    }
    let text = '';
    for (const choice of chunk.choices ?? []) {
      const d = choice.delta;
      if (typeof d?.content === 'string' && d.content !== '') {
        const kept = this.take(d.content);
        this.content += kept;
        text += kept;
      }
      for (const tc of d?.tool_calls ?? []) this.pushCall(tc);
      if (typeof choice.finish_reason === 'string' && choice.finish_reason !== '') this.finishReason = choice.finish_reason;
      if (this.cut) {
        this.finishReason = 'length';
        this.usage = null;
        break;
      }
    }
    return text;
  }

  /** The part of `piece` (output text) the reservation still allows; marks the cut when it does not allow all of it. */
  private take(piece: string): string {
    const room = this.maxOutputChars - this.outputChars;
    if (piece.length <= room) {
      this.outputChars += piece.length;
      return piece;
    }
    this.cut = true;
    this.outputChars = this.maxOutputChars;
    return piece.slice(0, Math.max(0, room));
  }

  private pushCall(tc: NonNullable<NonNullable<NonNullable<StreamChunk['choices']>[number]['delta']>['tool_calls']>[number]): void {
    const index = typeof tc.index === 'number' && Number.isInteger(tc.index) && tc.index >= 0 ? tc.index : null;
    if (index === null) return this.refuse(`a tool call delta has no valid index (${JSON.stringify(tc.index)})`);
    const id = typeof tc.id === 'string' && tc.id !== '' ? tc.id : undefined;
    let slot = this.current.get(index);
    if (!slot || (id !== undefined && slot.id !== undefined && slot.id !== id)) {
      slot = { index, name: '', args: '', argsKind: 'none', ...(id !== undefined && { id }) };
      this.calls.push(slot);
      this.current.set(index, slot);
    } else if (id !== undefined && slot.id === undefined) slot.id = id;
    const name = tc.function?.name;
    if (typeof name === 'string' && name !== '') {
      // a repeated name is one name; a fragment that does not repeat it continues it
      if (slot.name !== name) slot.name += this.take(name);
    } else if (name !== undefined && name !== null && name !== '') {
      this.refuse(`tool call ${index} has a name that is not text (${typeof name})`);
    }
    const args = tc.function?.arguments;
    if (args === undefined || args === null || args === '') return;
    if (typeof args === 'string') {
      if (slot.argsKind === 'json-value') return this.refuse(`tool call ${index} mixes an arguments object with text fragments`);
      slot.args += this.take(args);
      slot.argsKind = 'text';
    } else if (typeof args === 'object') {
      if (slot.argsKind !== 'none') return this.refuse(`tool call ${index} mixes an arguments object with other argument fragments`);
      slot.args = this.take(JSON.stringify(args));
      slot.argsKind = 'json-value';
    } else {
      this.refuse(`tool call ${index} has arguments of type ${typeof args}, not text`);
    }
  }

  private refuse(why: string): void {
    this.invalid ??= why;
  }

  /**
   * The assembled turn, or `invalid-response` with the first protocol violation seen, or when the
   * stream ended without a finish reason.
   * @param turnNo the turn's number, for the Runplane tool call ids.
   */
  result(turnNo: number): ModelTurnResult {
    if (this.invalid) return { ok: false, error: { kind: 'invalid-response', status: null, message: this.invalid } };
    if (!this.finishReason) return { ok: false, error: { kind: 'invalid-response', status: null, message: 'stream ended without a finish reason' } };
    // a call cut before its name arrived is dropped (the turn is cut: none of its calls is dispatched)
    const calls = this.cut ? this.calls.filter((c) => c.name !== '') : this.calls;
    const unnamed = calls.find((c) => c.name === '');
    if (unnamed) return { ok: false, error: { kind: 'invalid-response', status: null, message: `tool call ${unnamed.index} has no function name` } };
    // in stream-index order (stable: two calls under one index keep the order they were sent in)
    const ordered = [...calls].sort((a, b) => a.index - b.index);
    // one provider id is one call (the results sent back name it): the same call repeated under
    // another index (a glitch of some OpenAI-compatible servers) is that call once, never two
    // executions (K5: a trial's record_effect ran twice); one id for two different calls is no valid reply
    const byId = new Map<string, CallSlot>();
    const distinct: CallSlot[] = [];
    for (const c of ordered) {
      const first = c.id === undefined ? undefined : byId.get(c.id);
      if (!first) {
        if (c.id !== undefined) byId.set(c.id, c);
        distinct.push(c);
      } else if (first.name !== c.name || first.args !== c.args) {
        const what = first.name !== c.name ? 'functions' : 'arguments';
        return {
          ok: false,
          error: {
            kind: 'invalid-response',
            status: null,
            message: `tool calls ${first.index} and ${c.index} share the id ${JSON.stringify(c.id)} with different ${what}`,
          },
        };
      }
    }
    const toolCalls = distinct.map((c, position) => ({
      toolCallId: runToolCallId(turnNo, position, c.id),
      name: c.name,
      argumentsText: c.args,
    }));
    return { ok: true, turn: { content: this.content, toolCalls, finishReason: this.finishReason, usage: this.usage } };
  }
}
