/**
 * Builds a Run's prior events in order, with stream sequences, as the log would hold them: the
 * `given` of a decider specification (test/support/decider-spec.ts). Event times are fixed, one
 * second apart, before the specification's default clock.
 */
import {
  admissionIds,
  childClientMessageId,
  clarificationIdOf,
  makeEvent,
  sha256Hex,
  waitIdOf,
  type EventData,
  type EventType,
  type RunEvent,
  type StoredEvent,
} from '@runplane/contracts';
import { foldRun, type RunFacts } from '@runplane/run-facts';

export class History {
  readonly events: StoredEvent[] = [];
  /** The stream sequence of the last event added (set it to continue another History's sequence: Runs share one stream). */
  seq = 0;
  constructor(
    readonly runId = 'run-1',
    readonly conversationId = 'conv-1',
  ) {}

  add<T extends EventType>(type: T, key: string | number, data: EventData<T>): this {
    this.seq += 1;
    const at = new Date(Date.parse('2025-12-31T23:00:00.000Z') + this.seq * 1000);
    const event = makeEvent(
      type,
      { runId: this.runId, conversationId: this.conversationId, correlationId: 'msg-1', causationId: null },
      key,
      data,
      at,
    ) as RunEvent;
    this.events.push({ seq: this.seq, subject: `rp.run.${this.runId}.${event.owner}`, event });
    return this;
  }

  admitted(
    opts: {
      content?: string;
      tools?: string[];
      maxModelRequests?: number;
      maxToolCalls?: number;
      deadlineAt?: string;
      /** Further limits (token limits, the final-output reserve: K7). */
      limits?: Partial<EventData<'run.admitted'>['limits']>;
      noProgressSeconds?: number;
      /** The owner recorded on `run.admitted` (authentication on); none by default. */
      principal?: string;
    } = {},
  ): this {
    const content = opts.content ?? 'Compare SPY and QQQ';
    return this.add('run.admitted', 'admission', {
      message: { messageId: `msg-${this.runId}`, clientMessageId: 'c-1', content, contentSha256: sha256Hex(content) },
      grant: { tools: opts.tools ?? ['list_funds', 'get_holdings', 'compare_holdings', 'fund_metadata'], model: 'scripted' },
      limits: {
        maxModelRequests: opts.maxModelRequests ?? 8,
        maxToolCalls: opts.maxToolCalls ?? 16,
        deadlineAt: opts.deadlineAt ?? '2100-01-01T00:00:00.000Z',
        ...opts.limits,
        ...(opts.noProgressSeconds !== undefined ? { noProgressSeconds: opts.noProgressSeconds } : {}),
      },
      ...(opts.principal ? { principal: opts.principal } : {}),
    });
  }

  /** A model turn requested (with `request`'s `purpose` / `retryOf`, when given) and completed with `reply`. */
  turn(
    turn: number,
    reply: { content?: string; calls?: { id: string; name: string; args?: string }[]; finishReason?: string },
    request: { purpose?: 'finalization'; retryOf?: number } = {},
  ): this {
    this.add('model.turn.requested', turn, { turn, model: 'scripted', ...request });
    const toolCalls = (reply.calls ?? []).map((c) => ({ toolCallId: c.id, name: c.name, argumentsText: c.args ?? '{}' }));
    return this.add('model.turn.completed', turn, {
      turn,
      content: reply.content ?? '',
      toolCalls,
      finishReason: reply.finishReason ?? (toolCalls.length ? 'tool_calls' : 'stop'),
      usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15 },
    });
  }

  proposed(turn: number, id: string, name: string, args = '{}'): this {
    return this.add('tool.call.proposed', id, { toolCallId: id, name, argumentsText: args, turn });
  }

  dispatched(id: string, name: string): this {
    return this.add('tool.call.dispatched', id, { toolCallId: id, name });
  }

  receipt(id: string, name: string, status: 'succeeded' | 'failed' | 'denied' | 'unknown', result: unknown = { ok: true }): this {
    return this.add('tool.call.receipt', id, {
      toolCallId: id,
      name,
      status,
      ...(status === 'succeeded' ? { result } : { error: { code: status, message: `${name} ${status}` } }),
      durationMs: 1,
    });
  }

  /** Research turn `turn`: one `get_holdings` call (`c<turn>`) proposed, dispatched and succeeded: material to answer from. */
  researched(turn: number): this {
    const id = `c${turn}`;
    return this.turn(turn, { calls: [{ id, name: 'get_holdings' }] })
      .proposed(turn, id, 'get_holdings')
      .dispatched(id, 'get_holdings')
      .receipt(id, 'get_holdings', 'succeeded', { holdings: ['AAPL'] });
  }

  /**
   * Recovery's `settling` fences on the tools and then the runtime subject: the executors' subjects
   * closed before a settlement (K6, K9), as recovery closes a Run that finished with a tool call in
   * flight (one that finished on its own with every call receipted closes itself: no fence needed).
   */
  closed(epoch = 1): this {
    for (const fencedSubject of ['tools', 'runtime'] as const) {
      this.add('run.fenced', `settling/${fencedSubject}`, {
        fencedSubject,
        epoch,
        holder: epoch ? { service: 'runtime', instance: 'i-1' } : null,
        reason: 'settling',
        detail: 'execution finished',
        uncertain: [],
      });
    }
    return this;
  }

  // ---- waits and child Runs (K10) ----
  waitOpened(turn: number, toolCallId: string, question: string, expiresAt = '2026-01-01T01:00:00.000Z'): this {
    const waitId = waitIdOf(this.runId, toolCallId);
    return this.add('wait.opened', waitId, { waitId, toolCallId, turn, question, expiresAt });
  }

  waitAnswered(toolCallId: string, answer: string, answeredBy: string | null = 'ana'): this {
    const waitId = waitIdOf(this.runId, toolCallId);
    return this.add('wait.answered', waitId, { waitId, toolCallId, answer, answeredBy, requestId: 'req-1' });
  }

  childRequested(turn: number, toolCallId: string, question: string, limits: { maxModelRequests?: number; maxToolCalls?: number } = {}): this {
    const clientMessageId = childClientMessageId(this.runId, toolCallId);
    const childRunId = admissionIds(this.conversationId, clientMessageId).runId;
    return this.add('child.run.requested', childRunId, {
      childRunId,
      clientMessageId,
      toolCallId,
      turn,
      question,
      grant: { tools: ['list_funds'], model: 'scripted' },
      limits: { maxModelRequests: limits.maxModelRequests ?? 3, maxToolCalls: limits.maxToolCalls ?? 4, deadlineAt: '2099-01-01T00:00:00.000Z' },
    });
  }

  childSettled(childRunId: string, toolCallId: string, outcome: 'completed' | 'failed' | 'interrupted' | 'canceled', answer = ''): this {
    return this.add('child.run.settled', `child/${childRunId}`, { childRunId, toolCallId, outcome, reason: `child ${outcome}`, answer });
  }

  // ---- clarifications and settlement (K2, K3) ----
  /** The runtime registered a clarification question for its `ask_clarification` call. */
  clarificationRequested(turn: number, toolCallId: string, question: string): this {
    const clarificationId = clarificationIdOf(this.runId, toolCallId);
    return this.add('clarification.requested', clarificationId, { clarificationId, toolCallId, turn, question });
  }

  /**
   * Recovery fenced the executors for `reason` (a fault, a cancel, the deadline, no progress): on
   * the tools and then the runtime subject, or only on `more.subjects` (a fence half-written).
   * The holder is runtime `i-1`, the detail the reason, nothing uncertain, unless `more` says otherwise.
   */
  fenced(
    reason: Exclude<EventData<'run.fenced'>['reason'], 'settling'>,
    epoch = 1,
    more: Partial<Pick<EventData<'run.fenced'>, 'holder' | 'detail' | 'uncertain'>> & { subjects?: readonly ('tools' | 'runtime')[] } = {},
  ): this {
    for (const fencedSubject of more.subjects ?? (['tools', 'runtime'] as const)) {
      this.add('run.fenced', `${reason}/${fencedSubject}`, {
        fencedSubject,
        epoch,
        holder: more.holder === undefined ? { service: 'runtime', instance: 'i-1' } : more.holder,
        reason,
        detail: more.detail ?? reason,
        uncertain: more.uncertain ?? [],
      });
    }
    return this;
  }

  /** The lifecycle's settlement. */
  /** An operator's reconciliation of call `id` (`tool.call.reconciled`, admission's). */
  reconciled(id: string, name: string, outcome: 'succeeded' | 'failed' | 'not_executed' = 'not_executed'): this {
    return this.add('tool.call.reconciled', `reconciled-${id}`, {
      toolCallId: id,
      name,
      outcome,
      evidence: 'checked at the destination',
      operator: 'ops',
      requestId: 'req-1',
    });
  }

  settled(outcome: 'completed' | 'partial' | 'failed' | 'canceled' | 'interrupted', reason = `settled ${outcome}`): this {
    return this.add('run.settled', 'settlement', {
      outcome,
      reason,
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
    });
  }

  get facts(): RunFacts {
    return foldRun(this.runId, this.events);
  }
}

/** A Run whose one call, `record_effect` `e` of turn 1, was dispatched and came back `unknown` (K5). */
export const unknownEffectCall = (): History =>
  new History()
    .admitted({ tools: ['record_effect'] })
    .turn(1, { calls: [{ id: 'e', name: 'record_effect' }] })
    .proposed(1, 'e', 'record_effect')
    .dispatched('e', 'record_effect')
    .receipt('e', 'record_effect', 'unknown');
