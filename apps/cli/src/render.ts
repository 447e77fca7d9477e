/**
 * Terminal rendering of a Run as it is observed: one short line per fact, the answer's passages
 * (together, for `ask` and `demo`; where they were committed, for `watch`), and the settlement.
 */
import type { EventData, RunEvent, RunView, SizeCut, StoredEvent } from '@runplane/contracts';

/**
 * Text from the log (model output, tool errors) is shown, never executed by the terminal: control
 * characters (escape sequences), C1 controls and bidirectional overrides print as U+FFFD.
 */
// eslint-disable-next-line no-control-regex -- the point: control characters are what is replaced
export const terminalSafe = (text: string): string => text.replace(/[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]/g, '\uFFFD');

/** One-line summary of an event for timelines and progress output. */
export function summarize(e: RunEvent, hint: CommandHint = localCommand): string {
  switch (e.type) {
    case 'run.admitted':
      return `admitted message ${e.data.message.clientMessageId}: "${e.data.message.content.slice(0, 80)}"${e.data.link ? ` (${e.data.link.relation} of ${e.data.link.parentRunId})` : ''}`;
    case 'model.turn.requested':
      return `model turn ${e.data.turn} requested (${e.data.model})${e.data.purpose ? ` [${e.data.purpose}]` : ''}${e.data.retryOf ? ` [retry of turn ${e.data.retryOf}]` : ''}${e.data.maxTokens ? ` max_tokens=${e.data.maxTokens}` : ''}`;
    case 'model.turn.completed':
      return `model turn ${e.data.turn} completed: ${e.data.toolCalls.length} tool call(s), ${e.data.content.length} chars, finish=${e.data.finishReason}, ${e.data.usage ? `${e.data.usage.totalTokens} tokens` : 'usage unknown'}${cutText(e.data.cut)}`;
    case 'model.turn.failed':
      return `model turn ${e.data.turn} failed: ${e.data.error.kind} ${e.data.error.message} (${e.data.error.refused ? 'refused: nothing reached the model' : 'usage unknown'})${e.data.retry ? `; retry not before ${e.data.retry.notBefore} (backoff ${e.data.retry.delayMs} ms, failure ${e.data.retry.failuresInARow} in a row)` : ''}`;
    case 'tool.call.proposed':
      return `tool call proposed: ${e.data.name}(${e.data.argumentsText})`;
    case 'model.output.paragraph':
      return `model turn ${e.data.turn}: paragraph ${e.data.index} streamed (${e.data.text.length} chars)`;
    case 'model.output.progress':
      return `model turn ${e.data.turn}: still streaming (${e.data.characters} chars so far, no paragraph finished yet)`;
    case 'tool.call.dispatched':
      return `tool call dispatched: ${e.data.name} [${e.data.toolCallId}]`;
    case 'tool.call.receipt':
      return `receipt ${e.data.status}: ${e.data.name}${e.data.effect ? ` {${e.data.effect}}` : ''}${e.data.error ? ` (${e.data.error.code}: ${e.data.error.message})` : ''}${e.data.resultRef ? ` [stored ${e.data.resultRef.bytes} B sha256:${e.data.resultRef.sha256.slice(0, 12)}]` : ''}${e.data.reusedFrom ? ` [not run: the result of ${e.data.reusedFrom.toolCallId} in parent Run ${e.data.reusedFrom.runId}]` : ''}`;
    case 'run.execution.finished':
      return `execution finished: ${e.data.reason} (${e.data.detail})`;
    case 'run.finalization.started':
      return `finalization-only: ${e.data.reason} (${e.data.detail}); unfinished: ${e.data.unfinished.map((u) => u.part).join('; ')}`;
    case 'passage.committed':
      // counted from 1 within its turn, as the Run viewer shows it (the event's `index` counts from 0)
      return `passage ${e.data.index + 1} of turn ${e.data.sourceTurn} committed (v${e.data.version}, ${e.data.text.length} chars)`;
    case 'answer.published':
      return `answer published: ${e.data.passageIds.length} passage(s), ${e.data.characters} chars of passage text (the turn's text less the blank lines between paragraphs and any unanswered block)${e.data.unanswered?.length ? `, ${e.data.unanswered.length} part(s) unanswered` : ''}`;
    case 'run.settled':
      return `SETTLED ${e.data.outcome}: ${e.data.reason}`;
    case 'run.cancel.requested':
      return `CANCEL requested by ${e.data.requestedBy ?? 'the user'}${e.data.reason ? `: ${e.data.reason}` : ''}`;
    case 'lease.granted':
      return `lease granted: epoch ${e.data.epoch}${e.data.epoch > 1 ? ' (woken)' : ''} to ${e.data.holder.service}/${e.data.holder.instance.slice(0, 8)} (ttl ${e.data.ttlMs} ms)`;
    case 'lease.parked':
      return `LEASE parked for the lost holder (epoch ${e.data.epoch} closed, ${e.data.reason}): ${e.data.detail}; the Run stays ${e.data.on}${e.data.woken ? ', its wake recorded: continues at the next epoch' : ''}`;
    case 'run.handed_over':
      return `HANDED OVER by ${e.data.holder.service}/${e.data.holder.instance.slice(0, 8)} (${e.data.reason}, epoch ${e.data.epoch} closed at a safe point, ${e.data.pendingToolCalls} tool call(s) pending): the next replica takes it at epoch ${e.data.epoch + 1}`;
    case 'run.fenced': {
      const uncertain = e.data.uncertain.map((u) => (u.kind === 'model-turn' ? `model turn ${u.turn}` : `${u.name} [${u.toolCallId}]`));
      return `FENCED ${e.data.fencedSubject} (epoch ${e.data.epoch}, ${e.data.reason}): ${e.data.detail}${uncertain.length ? `; outcome unknown: ${uncertain.join(', ')}` : ''}`;
    }
    // tool effects (K5)
    case 'tool.call.late_observed':
      return `late observation: ${e.data.name} [${e.data.toolCallId}] ${e.data.status}${e.data.error ? ` (${e.data.error.code}: ${e.data.error.message})` : ''} (after its unknown receipt, or after the Run's fence or settlement: what the Run recorded does not change)`;
    case 'tool.call.reconciled':
      return `reconciled by ${e.data.operator}: ${e.data.name} [${e.data.toolCallId}] ${e.data.outcome} (evidence: ${e.data.evidence.slice(0, 120)})`;
    // waits and child Runs (K10)
    case 'wait.opened':
      return `WAIT opened ${e.data.waitId}: "${e.data.question.slice(0, 120)}" (expires ${e.data.expiresAt}); answer with: ${hint('answer', `${e.runId} ${e.data.waitId} "<text>"`)}`;
    case 'wait.answered':
      return `WAIT answered ${e.data.waitId} by ${e.data.answeredBy ?? 'the user'}: "${e.data.answer.slice(0, 120)}"`;
    case 'child.run.requested':
      return `CHILD requested ${e.data.childRunId}: "${e.data.question.slice(0, 100)}" (grant: ${e.data.limits.maxModelRequests} model request(s), ${e.data.limits.maxToolCalls} tool call(s), deadline ${e.data.limits.deadlineAt})`;
    case 'child.run.settled':
      return `CHILD settled ${e.data.childRunId}: ${e.data.outcome} (${e.data.answer.length} chars of answer)`;
    case 'clarification.requested':
      return `CLARIFICATION ${e.data.clarificationId}: "${e.data.question.slice(0, 120)}"; answer with: ${hint('reply', `${e.runId} ${e.data.clarificationId} "<text>"`)}`;
    case 'context.carried':
      return `CONTEXT carried ${e.data.items.length} item(s) from ${[...e.data.historyRunIds, ...(e.data.parentRunId ? [e.data.parentRunId] : [])].join(', ') || 'no earlier Run'} (${e.data.dropped.length} dropped, ${e.data.unknownEffects.length} unknown effect(s))`;
  }
}

/**
 * Renders an event for `watch`: one protocol line per fact, a committed passage in full where it
 * was committed (between the other facts), the settlement as a block ({@link renderSettlement}).
 */
export function renderLive(e: RunEvent, seq: number, hint: CommandHint = localCommand): string {
  if (e.type === 'passage.committed') return `\n${e.data.text}`;
  if (e.type === 'run.settled') return renderSettlement(e);
  return renderProtocol(e, seq, hint);
}

/** One protocol line of a Run followed live: `  #<seq> [<owner>] <summary>` ({@link summarize}). */
export function renderProtocol(e: RunEvent, seq: number, hint: CommandHint = localCommand): string {
  return `  #${seq} [${e.owner}] ${summarize(e, hint)}`;
}

/**
 * How a printed hint names a CLI command (`command`, then `rest`: its arguments), so that it can
 * be pasted as it is: `runplane` is no command on the PATH of a checkout.
 */
export type CommandHint = (command: string, rest: string) => string;

/** The command run from the checkout, against the default endpoints: `npm run runplane -- <command> <rest>`. */
export const localCommand: CommandHint = (command, rest) => `npm run runplane -- ${command} ${rest}`;

/**
 * The command run from the checkout against these services (`--admission`, `--publication`), as
 * `up`'s last line prints its `ask`: a hint pasted in another terminal talks to this stack, not to
 * whatever answers on the default ports.
 */
export const commandFor =
  (endpoints: { admission: string; publication: string }): CommandHint =>
  (command, rest) =>
    `npm run runplane -- ${command} --admission ${endpoints.admission} --publication ${endpoints.publication} ${rest}`;

/**
 * The answer of a Run as an observer assembles it from the events it is shown, the way
 * publication serves `GET /v1/runs/{runId}/answer` (run-facts `answerPassages`): the latest
 * version of each committed passage; once `answer.published` is seen, exactly the passages it
 * lists, in its order; before that (a Run that failed, was canceled or interrupted after
 * committing text), every committed passage by source turn, then index.
 */
export class AnswerAssembly {
  private readonly passages = new Map<string, EventData<'passage.committed'>>();
  private published: readonly string[] | null = null;

  /** Takes one observed event; every type but `passage.committed` and `answer.published` is ignored. */
  add(e: RunEvent): void {
    if (e.type === 'passage.committed') {
      const before = this.passages.get(e.data.passageId);
      if (!before || before.version < e.data.version) this.passages.set(e.data.passageId, e.data);
    } else if (e.type === 'answer.published') {
      this.published = e.data.passageIds;
    }
  }

  /** The answer's passage texts, in order ([] when nothing was committed). */
  texts(): string[] {
    if (this.published) return this.published.flatMap((id) => this.passages.get(id)?.text ?? []);
    return [...this.passages.values()].sort((a, b) => a.sourceTurn - b.sourceTurn || a.index - b.index).map((p) => p.text);
  }
}

/**
 * The answer block of `ask` and `demo`: a heading, then every passage of the answer together,
 * separated by blank lines, with no protocol line between them. `settled` false says the Run was
 * not seen to settle (the text may be incomplete).
 */
export function renderAnswer(texts: readonly string[], settled = true): string {
  const heading = settled ? 'Answer:' : 'Answer so far (no settlement seen):';
  // without the settlement, no passage seen is not no passage committed (publication may be unreachable)
  if (texts.length === 0)
    return `\n${heading} ${settled ? 'none (no passage was committed)' : 'none seen (passages committed meanwhile could not be read here)'}`;
  return [`\n${heading}`, ...texts].join('\n\n');
}

/** The settlement block: outcome and reason, usage (unknown usage marked, K9), unanswered parts, receipts. */
export function renderSettlement(e: Extract<RunEvent, { type: 'run.settled' }>): string {
  const u = e.data.usage;
  return [
    '',
    `Settlement (by ${e.owner}): ${e.data.outcome.toUpperCase()}: ${e.data.reason}`,
    `  usage: ${u.modelRequests} model request(s), ${u.toolCalls} tool call(s), ${tokensText(u)}`,
    ...(e.data.unanswered?.length ? [`  unanswered: ${e.data.unanswered.map((p) => `${p.part} (${p.reason})`).join('; ')}`] : []),
    `  receipts: ${e.data.receipts.map((r) => `${r.name}=${r.status}`).join(', ') || 'none'}`,
  ].join('\n');
}

/**
 * A settlement's tokens as measured: unknown usage (a turn without a usage chunk, a failed or cut
 * request, a dead process) is shown as unknown with its count, never as 0 tokens (K9). A
 * settlement written before `unknownUsageTurns` existed shows its sums as they were recorded.
 */
export function tokensText(u: EventData<'run.settled'>['usage']): string {
  const unknown = u.unknownUsageTurns ?? 0;
  if (unknown === 0) return `${u.promptTokens} prompt + ${u.completionTokens} completion tokens`;
  if (unknown >= u.modelRequests) return `tokens unknown (no usage reported for any of the ${unknown} model request(s))`;
  return `at least ${u.promptTokens} prompt + ${u.completionTokens} completion tokens (usage unknown for ${unknown} of ${u.modelRequests} model request(s))`;
}

/**
 * Exit codes of `runplane ask`, `demo`, and `continue` / `reply` when they follow the new Run:
 * they tell outcomes apart for scripts (K9). The one list for people: docs/cli.md "Exit codes".
 */
export const EXIT_CODES = { completed: 0, failed: 1, partial: 3 } as const;

/** Exit code of `runplane audit` when a check is broken (0: every check held; 1: the audit could not run). */
export const AUDIT_BROKEN_EXIT = 2;

/**
 * The exit code for a settlement: 0 `completed`; 3 `partial` (an answer that lists what it did
 * not answer, or text committed before a failure: the unanswered parts are printed with the
 * settlement); 1 `failed`, `canceled`, `interrupted`, or no settlement seen.
 */
export function exitCodeOf(settlement: RunEvent | null): number {
  if (settlement?.type !== 'run.settled') return EXIT_CODES.failed;
  if (settlement.data.outcome === 'completed') return EXIT_CODES.completed;
  if (settlement.data.outcome === 'partial') return EXIT_CODES.partial;
  return EXIT_CODES.failed;
}

/** A duration for people: `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`. */
export function durationText(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

/**
 * Per-step clocks of a timeline (K7), keyed by stream sequence: on a model turn's outcome, how
 * long the turn took since it was requested; on a tool call's dispatch, how long it waited since
 * its proposal; on its receipt, how long it ran since its dispatch; on a wake, how long the Run
 * was parked. Pure: from event times only.
 */
export function stepClocks(events: readonly StoredEvent[]): Map<number, string> {
  const out = new Map<number, string>();
  const turnRequested = new Map<number, string>();
  const proposed = new Map<string, string>();
  const dispatched = new Map<string, string>();
  const opened = new Map<string, string>();
  const since = (from: string | undefined, to: string) => (from === undefined ? null : durationText(Math.max(0, Date.parse(to) - Date.parse(from))));
  for (const { seq, event: e } of events) {
    let text: string | null = null;
    switch (e.type) {
      case 'model.turn.requested':
        turnRequested.set(e.data.turn, e.occurredAt);
        break;
      case 'model.turn.completed':
      case 'model.turn.failed': {
        const d = since(turnRequested.get(e.data.turn), e.occurredAt);
        if (d) text = `turn took ${d}`;
        break;
      }
      case 'tool.call.proposed':
        proposed.set(e.data.toolCallId, e.occurredAt);
        break;
      case 'tool.call.dispatched': {
        dispatched.set(e.data.toolCallId, e.occurredAt);
        const d = since(proposed.get(e.data.toolCallId), e.occurredAt);
        if (d) text = `${d} after its proposal`;
        break;
      }
      case 'tool.call.receipt': {
        // the tool's own run time (from when a thread began it), and the time since its dispatch
        // when a wait for a free thread made that longer
        const d = since(dispatched.get(e.data.toolCallId), e.occurredAt);
        const ran = durationText(e.data.durationMs);
        if (d) text = d === ran ? `ran ${ran}` : `ran ${ran}, ${d} after its dispatch`;
        break;
      }
      case 'wait.opened':
        opened.set(e.data.waitId, e.occurredAt);
        break;
      case 'wait.answered': {
        const d = since(opened.get(e.data.waitId), e.occurredAt);
        if (d) text = `parked ${d}`;
        break;
      }
    }
    if (text) out.set(seq, text);
  }
  return out;
}

/**
 * One timeline line: sequence, time, time since the previous event (`+1.2 s`), owner, type,
 * summary and, for a step's end, its clock ({@link stepClocks}). Each service stamps its events
 * with its own clock, so a later event may be stamped earlier than the one before it: its gap is
 * shown negative (`-3 ms`), as recorded, never rounded to `+0 ms`.
 */
export function timelineLine(stored: StoredEvent, previousAt: string | null, step: string | undefined): string {
  const e = stored.event;
  const ms = previousAt === null ? 0 : Date.parse(e.occurredAt) - Date.parse(previousAt);
  const gap = previousAt === null ? '' : `${ms < 0 ? '-' : '+'}${durationText(Math.abs(ms))}`;
  return `${String(stored.seq).padStart(6)}  ${e.occurredAt}  ${gap.padStart(12)}  ${e.owner.padEnd(11)} ${e.type.padEnd(22)} ${summarize(e)}${step ? `  [${step}]` : ''}`;
}

/** `used/limit`, the limit shown as `-` when there is none. */
const usedOf = (used: number, limit: number | null): string => `${used}/${limit ?? '-'}`;

/**
 * The `runplane status` view of a Run (K7): status and outcome, budget used against the grant's
 * limits (tokens measured, with the requests whose usage is unknown marked as unknown, never as
 * 0), and its clocks: queue time, execution time, time since the last progress and to the
 * deadline (the last two against `now`, while the Run is not settled).
 */
/** Micro-units as a decimal amount, exactly (`12345` -> `0.012345`). */
export function moneyText(micros: number, currency: string | null): string {
  const whole = Math.floor(micros / 1_000_000);
  const frac = String(micros % 1_000_000).padStart(6, '0');
  return `${whole}.${frac}${currency ? ` ${currency}` : ''}`;
}

/**
 * The Run's cost line (K7): measured, plus the range of unknown usage (between the measured cost
 * and measured + the unknown bound, never counted as 0), against the money limit.
 */
export function costText(v: Pick<RunView, 'costMicros' | 'costUnknownMaxMicros' | 'maxCostMicros' | 'costCurrency'>): string {
  if (v.costCurrency === null) return 'not priced';
  const c = v.costCurrency;
  const range =
    v.costUnknownMaxMicros > 0
      ? `${moneyText(v.costMicros, c)} measured, up to ${moneyText(v.costMicros + v.costUnknownMaxMicros, c)} with unknown usage`
      : moneyText(v.costMicros, c);
  return `${range}${v.maxCostMicros !== null ? ` (limit ${moneyText(v.maxCostMicros, c)})` : ''}`;
}

export function renderStatus(v: RunView, now: Date): string {
  const t = now.getTime();
  const settled = v.status === 'settled';
  const ms = (iso: string | null) => (iso === null ? null : Date.parse(iso));
  const executing =
    v.executingMs !== null ? durationText(v.executingMs) : v.startedAt !== null ? `${durationText(t - ms(v.startedAt)!)} so far` : 'not started';
  const queued = v.queuedMs !== null ? durationText(v.queuedMs) : `${durationText(t - ms(v.admittedAt)!)} so far (not started)`;
  const tokens = (measured: number, limit: number | null) =>
    `${measured}${v.unknownUsageTurns > 0 ? '+' : ''}/${limit ?? '-'}${v.unknownUsageTurns > 0 ? ' measured' : ''}`;
  const reserve =
    v.reserveModelRequests === null && v.reserveOutputTokens === null
      ? 'none'
      : `${v.reserveModelRequests ?? 0} model request(s), ${v.reserveOutputTokens ?? 0} output tokens`;
  const lines = [
    `Run ${v.runId} (conversation ${v.conversationId})`,
    `  question:       ${v.question.slice(0, 120)}`,
    `  status:         ${v.status}${v.outcome ? ` ${v.outcome.toUpperCase()}: ${v.reason ?? ''}` : ''}`,
    'budget (used/limit):',
    `  model requests: ${usedOf(v.modelRequests, v.maxModelRequests)} (final reserve: ${reserve})`,
    `  tool calls:     ${usedOf(v.toolCalls, v.maxToolCalls)}`,
    `  input tokens:   ${tokens(v.promptTokens, v.maxInputTokens)}`,
    `  output tokens:  ${tokens(v.completionTokens, v.maxOutputTokens)}`,
    `  usage unknown:  ${v.unknownUsageTurns === 0 ? 'none' : `${v.unknownUsageTurns} model request(s) (not counted as 0 tokens)`}`,
    `  cost:           ${costText(v)}`,
    'clocks:',
    `  admitted:       ${v.admittedAt}`,
    `  queued:         ${queued}`,
    `  executing:      ${executing}${v.executionEndedAt ? ` (ended ${v.executionEndedAt})` : ''}`,
  ];
  if (v.lastProgressAt !== null) {
    const since = settled ? '' : `, ${durationText(t - ms(v.lastProgressAt)!)} ago`;
    lines.push(
      `  last progress:  ${v.lastProgressAt}${since}${v.noProgressSeconds !== null ? ` (limit ${v.noProgressSeconds} s without progress)` : ''}`,
    );
  }
  if (v.deadlineAt !== null) {
    const left = ms(v.deadlineAt)! - t;
    lines.push(
      `  deadline:       ${v.deadlineAt}${settled ? '' : left >= 0 ? `, ${durationText(left)} left` : `, passed ${durationText(-left)} ago`}`,
    );
  }
  if (v.settledAt) lines.push(`  settled:        ${v.settledAt}`);
  return lines.join('\n');
}

/** What a turn's record says was cut for its size (K9, K11), or ''. */
function cutText(cut: readonly SizeCut[] | undefined): string {
  if (!cut?.length) return '';
  const what = cut.map(
    (c) => `${c.field === 'content' ? 'text' : `${c.field} of ${c.toolCallId}`} (${c.bytes} bytes, ${c.keptCharacters} chars kept)`,
  );
  return `; CUT for its size: ${what.join(', ')}`;
}
