/**
 * The facts of one Run, folded from its events in stream order. Every owner decides its next
 * step from this fold (`decide(facts, ...) -> events`), never from in-memory state, so a
 * restarted or redelivered handler reaches the same decision (K10, K11).
 */
import { subjectTokenOf, type EventData, type Owner, type RunEvent, type StoredEvent, type TokenPrice, type TurnCost } from '@runplane/contracts';

export interface TurnFacts {
  turn: number;
  requestedAt: string;
  /** The request as recorded: its reservation (`maxTokens`, `inputTokensEstimate`), `purpose`, `retryOf` (K7). */
  request: EventData<'model.turn.requested'>;
  completed: EventData<'model.turn.completed'> | null;
  /** When the turn's completion was recorded (the decision clock of `model.turn.completed`), or null. */
  completedAt: string | null;
  failed: EventData<'model.turn.failed'> | null;
  /** The paragraphs recorded while the turn streamed (`model.output.paragraph`), in index order. */
  paragraphs: EventData<'model.output.paragraph'>[];
  /** Characters streamed by the latest progress evidence (`model.output.progress`, K7), 0 when none. */
  progressCharacters: number;
}

/** A question for a human the Run parked on (K10): opened by the runtime, answered through admission. */
export interface WaitFacts {
  waitId: string;
  toolCallId: string;
  turn: number;
  question: string;
  openedAt: string;
  expiresAt: string;
  answer: (EventData<'wait.answered'> & { at: string }) | null;
}

/** A child Run the Run spawned and parked on (K10): requested by the runtime, its result recorded by the lifecycle. */
export interface ChildFacts {
  childRunId: string;
  clientMessageId: string;
  toolCallId: string;
  turn: number;
  question: string;
  grant: EventData<'child.run.requested'>['grant'];
  limits: EventData<'child.run.requested'>['limits'];
  requestedAt: string;
  result: (EventData<'child.run.settled'> & { at: string }) | null;
}

export interface ToolCallFacts {
  toolCallId: string;
  turn: number;
  name: string;
  argumentsText: string;
  /** Stream order of the proposal within the Run (for budget counting). */
  proposedSeq: number;
  dispatched: boolean;
  receipt: EventData<'tool.call.receipt'> | null;
  // ---- tool effects (K5) ----
  /** The real outcome that arrived after an `unknown` receipt (never rewrites the receipt). */
  lateObserved?: EventData<'tool.call.late_observed'> & { at: string };
  /** An operator's reconciliation of an `unknown` call. */
  reconciliation?: EventData<'tool.call.reconciled'> & { at: string };
}

export interface RunFacts {
  runId: string;
  conversationId: string;
  correlationId: string;
  admitted: (EventData<'run.admitted'> & { at: string; eventId: string }) | null;
  turns: TurnFacts[];
  toolCalls: Map<string, ToolCallFacts>;
  finished: EventData<'run.execution.finished'> | null;
  /** The one-way move into finalization-only (K7, K9), or null while the Run researches. */
  finalization: (EventData<'run.finalization.started'> & { at: string }) | null;
  passages: Map<string, EventData<'passage.committed'>>;
  answer: EventData<'answer.published'> | null;
  settled: (EventData<'run.settled'> & { at: string }) | null;
  /**
   * The execution lease grants recorded, in order (K6): by the runtime that took the lease, with
   * its first event under it; in logs written before issue [9], by recovery.
   */
  leases: EventData<'lease.granted'>[];
  /**
   * The highest lease epoch recovery closed with `lease.parked` (a parked Run's holder lost before
   * it released the lease itself, K10), 0 when none: a runtime holding that epoch or an older one
   * writes nothing more (K6).
   */
  parkedEpoch: number;
  /**
   * The latest handover (`run.handed_over`): the holder of that epoch recorded the transfer at a
   * safe point while it drained; it writes nothing more under that epoch (K6), and the next
   * holder takes the lease at `epoch + 1` (K10). Null when the Run was never handed over.
   */
  handedOver: (EventData<'run.handed_over'> & { at: string }) | null;
  /** The user's cancel intent, when recorded (K4). */
  cancelRequested: (EventData<'run.cancel.requested'> & { at: string }) | null;
  /** Questions for a human, by waitId, in the order opened (K10). */
  waits: Map<string, WaitFacts>;
  /** Child Runs spawned, by childRunId, in the order requested (K10). */
  children: Map<string, ChildFacts>;
  /** Clarification questions the Run registered (K2), by clarificationId. */
  clarifications: Map<string, EventData<'clarification.requested'> & { at: string }>;
  /** What the Run carries from earlier Runs into its model requests (K2, K3), once recorded. */
  carried: EventData<'context.carried'> | null;
  /** The fence that ended the Run's execution (the first marker recovery wrote), or null (K6, K10). */
  fenced: EventData<'run.fenced'> | null;
  /**
   * Per executor subject: true while its last event is a fence of recovery (`run.fenced`), late
   * observations aside (the one fact allowed after it). Every executor append decided before that
   * fence is refused by the log, so a settlement made while both are closed cannot be followed by a
   * stale executor's append (K6, K9).
   */
  closed: { runtime: boolean; tools: boolean };
  /**
   * True while the execution closed itself, with no fence (issue [9]): the runtime subject's last
   * event is the runtime's own `run.execution.finished` (its decider appends nothing after it, and
   * any runtime append decided from a read before it expects an older sequence of that subject,
   * so the log refuses it: K6), and when it was recorded every proposed tool call had its receipt
   * (so the tools decide nothing more for the Run: a dispatch or receipt decided from a read before
   * the last receipt expects an older sequence of the tools subject and is refused; only a late
   * observation of an `unknown` call may follow, as after a fence). Then no executor append decided
   * before a settlement can land after it, exactly as if both subjects were fenced (K6, K9): see
   * {@link closedForSettlement}. False when a call was proposed without a receipt at the finish (a
   * deadline stop with a call in flight: recovery fences it as before) and after any later event on
   * the runtime subject (a fence of recovery).
   */
  closesItself: boolean;
  /**
   * Last stream sequence on each of the Run's subjects (`<prefix>.run.<runId>.<token>`, one per
   * owner; recovery's fences stand on the executors' subjects): the expectation for the next
   * append on that subject (K6).
   */
  lastSeqByOwner: Record<Owner, number>;
  /**
   * When the Run last made progress (K7): its admission, then the latest fact counted by
   * {@link countsAsProgress} (answer text streamed, a turn with text, a valid tool call, a
   * receipt, a wake). Lease grants, fences and requests are not progress. Null before admission.
   */
  lastProgressAt: string | null;
  /** Last stream sequence of the Run (any owner); 0 before admission. */
  lastSeq: number;
  lastEvent: RunEvent | null;
}

export function emptyFacts(runId: string): RunFacts {
  return {
    runId,
    conversationId: '',
    correlationId: '',
    admitted: null,
    turns: [],
    toolCalls: new Map(),
    finished: null,
    finalization: null,
    passages: new Map(),
    answer: null,
    settled: null,
    leases: [],
    parkedEpoch: 0,
    handedOver: null,
    cancelRequested: null,
    waits: new Map(),
    children: new Map(),
    clarifications: new Map(),
    carried: null,
    fenced: null,
    closed: { runtime: false, tools: false },
    closesItself: false,
    lastSeqByOwner: { admission: 0, runtime: 0, tools: 0, publication: 0, recovery: 0, lifecycle: 0 },
    lastProgressAt: null,
    lastSeq: 0,
    lastEvent: null,
  };
}

/**
 * Applies one stored event. Pure: returns a new facts object; `facts` is not modified. Copy on
 * write: only the collection (and the one entry) the event changes is copied, the rest is shared
 * with `facts` (K8: a Run with thousands of streamed paragraphs does not cost every service that
 * folds it a copy of everything per event).
 */
export function evolve(facts: RunFacts, stored: StoredEvent): RunFacts {
  return apply(facts, stored, false);
}

/**
 * {@link evolve} for a caller that owns `facts` (built by itself from {@link emptyFacts}) and
 * reads it no more after the call, like a running fold or an auditor's replay: the collections
 * are changed in place instead of copied, so replaying a Run costs time linear in its events.
 */
export function evolveOwned(facts: RunFacts, stored: StoredEvent): RunFacts {
  return apply(facts, stored, true);
}

/**
 * {@link evolve}, or with `owned` the same step on facts nobody else holds (the running fold of
 * {@link foldRun}): its collections are then changed in place, so a fold from scratch is linear
 * in the Run's events.
 */
function apply(facts: RunFacts, stored: StoredEvent, owned: boolean): RunFacts {
  const e = stored.event;
  const next: RunFacts = {
    ...facts,
    closed: closedAfter(facts.closed, e),
    closesItself: closesItselfAfter(facts, e),
    lastSeqByOwner: { ...facts.lastSeqByOwner, [subjectTokenOf(e)]: stored.seq },
    lastProgressAt: countsAsProgress(e) ? laterOf(facts.lastProgressAt, e.occurredAt) : facts.lastProgressAt,
    lastSeq: stored.seq,
    lastEvent: e,
  };
  const own = <V>(m: Map<string, V>): Map<string, V> => (owned ? m : new Map(m));
  /** The turn `n`, writable (a fresh copy in a fresh `turns` array unless owned); undefined when there is no such turn. */
  const turn = (n: number): TurnFacts | undefined => {
    const i = facts.turns.findIndex((x) => x.turn === n);
    if (i < 0) return undefined;
    if (owned) return facts.turns[i];
    const copy = { ...facts.turns[i]! };
    next.turns = facts.turns.slice();
    next.turns[i] = copy;
    return copy;
  };
  /** The entry `id` of one of the facts' maps, writable (a fresh copy in a fresh map unless owned). */
  const entry = <K extends 'toolCalls' | 'waits' | 'children'>(
    key: K,
    id: string,
  ): (RunFacts[K] extends Map<string, infer V> ? V : never) | undefined => {
    const map = facts[key] as Map<string, object>;
    const found = map.get(id);
    if (!found || owned) return found as never;
    const copy = { ...found };
    (next[key] as Map<string, object>) = new Map(map).set(id, copy);
    return copy as never;
  };
  switch (e.type) {
    case 'run.admitted':
      next.conversationId = e.conversationId;
      next.correlationId = e.correlationId;
      next.admitted = { ...e.data, at: e.occurredAt, eventId: e.eventId };
      break;
    case 'model.turn.requested':
      next.turns = [
        ...facts.turns, // a handful of turns: copied even when owned
        {
          turn: e.data.turn,
          requestedAt: e.occurredAt,
          request: e.data,
          completed: null,
          completedAt: null,
          failed: null,
          paragraphs: [],
          progressCharacters: 0,
        },
      ];
      break;
    case 'model.output.paragraph': {
      const known = facts.turns.find((x) => x.turn === e.data.turn);
      if (!known) break;
      const ps = known.paragraphs;
      const lastIndex = ps.length ? ps[ps.length - 1]!.index : -1;
      // paragraphs come in index order: appending is the usual case; anything else is checked and sorted in
      if (e.data.index > lastIndex) {
        const t = turn(e.data.turn)!;
        if (owned) t.paragraphs.push(e.data);
        else t.paragraphs = [...ps, e.data];
      } else if (!ps.some((p) => p.index === e.data.index)) turn(e.data.turn)!.paragraphs = [...ps, e.data].sort((a, b) => a.index - b.index);
      break;
    }
    case 'model.output.progress': {
      const t = turn(e.data.turn);
      if (t) t.progressCharacters = Math.max(t.progressCharacters, e.data.characters);
      break;
    }
    case 'model.turn.completed': {
      const known = facts.turns.find((x) => x.turn === e.data.turn);
      if (known && !known.completed) {
        const t = turn(e.data.turn)!;
        t.completed = e.data;
        t.completedAt = e.occurredAt;
      }
      break;
    }
    case 'model.turn.failed': {
      const t = turn(e.data.turn);
      if (t) t.failed = e.data;
      break;
    }
    case 'tool.call.proposed':
      next.toolCalls = own(facts.toolCalls).set(e.data.toolCallId, {
        toolCallId: e.data.toolCallId,
        turn: e.data.turn,
        name: e.data.name,
        argumentsText: e.data.argumentsText,
        proposedSeq: stored.seq,
        dispatched: false,
        receipt: null,
      });
      break;
    case 'tool.call.dispatched': {
      const c = entry('toolCalls', e.data.toolCallId);
      if (c) c.dispatched = true;
      break;
    }
    case 'tool.call.receipt': {
      const c = entry('toolCalls', e.data.toolCallId);
      if (c) c.receipt = e.data;
      break;
    }
    case 'run.execution.finished':
      next.finished = e.data;
      break;
    case 'run.finalization.started':
      next.finalization ??= { ...e.data, at: e.occurredAt };
      break;
    case 'passage.committed': {
      const before = facts.passages.get(e.data.passageId);
      if (!before || e.data.version > before.version) next.passages = own(facts.passages).set(e.data.passageId, e.data);
      break;
    }
    case 'answer.published':
      next.answer = e.data;
      break;
    case 'run.settled':
      next.settled = { ...e.data, at: e.occurredAt };
      break;
    case 'lease.granted':
      next.leases = [...facts.leases, e.data];
      break;
    case 'run.cancel.requested':
      next.cancelRequested ??= { ...e.data, at: e.occurredAt };
      break;
    case 'run.fenced':
      next.fenced ??= e.data;
      break;
    case 'lease.parked':
      next.parkedEpoch = Math.max(facts.parkedEpoch, e.data.epoch);
      break;
    case 'run.handed_over':
      if (!facts.handedOver || e.data.epoch > facts.handedOver.epoch) next.handedOver = { ...e.data, at: e.occurredAt };
      break;
    // ---- waits and child Runs (K10) ----
    case 'wait.opened':
      if (!facts.waits.has(e.data.waitId)) {
        const { waitId, toolCallId, turn, question, expiresAt } = e.data;
        next.waits = own(facts.waits).set(waitId, { waitId, toolCallId, turn, question, expiresAt, openedAt: e.occurredAt, answer: null });
      }
      break;
    case 'wait.answered': {
      if (facts.waits.get(e.data.waitId)?.answer === null) entry('waits', e.data.waitId)!.answer = { ...e.data, at: e.occurredAt };
      break;
    }
    case 'child.run.requested':
      if (!facts.children.has(e.data.childRunId)) {
        const { childRunId, clientMessageId, toolCallId, turn, question, grant, limits } = e.data;
        next.children = own(facts.children).set(childRunId, {
          childRunId,
          clientMessageId,
          toolCallId,
          turn,
          question,
          grant,
          limits,
          requestedAt: e.occurredAt,
          result: null,
        });
      }
      break;
    case 'child.run.settled': {
      if (facts.children.get(e.data.childRunId)?.result === null) entry('children', e.data.childRunId)!.result = { ...e.data, at: e.occurredAt };
      break;
    }
    case 'clarification.requested':
      if (!facts.clarifications.has(e.data.clarificationId))
        next.clarifications = own(facts.clarifications).set(e.data.clarificationId, { ...e.data, at: e.occurredAt });
      break;
    case 'context.carried':
      next.carried ??= e.data;
      break;
    // ---- tool effects (K5) ----
    case 'tool.call.late_observed': {
      const known = facts.toolCalls.get(e.data.toolCallId);
      if (known && !known.lateObserved) entry('toolCalls', e.data.toolCallId)!.lateObserved = { ...e.data, at: e.occurredAt };
      break;
    }
    case 'tool.call.reconciled': {
      const known = facts.toolCalls.get(e.data.toolCallId);
      if (known && !known.reconciliation) entry('toolCalls', e.data.toolCallId)!.reconciliation = { ...e.data, at: e.occurredAt };
      break;
    }
  }
  return next;
}

/**
 * Folds a Run's stored events (in stream order) into its facts. An event whose id was already
 * folded (a copy stored again under another message id) is not a second fact: it is skipped.
 */
export function foldRun(runId: string, events: readonly StoredEvent[]): RunFacts {
  const seen = new Set<string>();
  // the running fold is this function's own (emptyFacts is fresh): each step may change it in place
  return events.reduce((facts, stored) => {
    if (seen.has(stored.event.eventId)) return facts;
    seen.add(stored.event.eventId);
    return apply(facts, stored, true);
  }, emptyFacts(runId));
}

/**
 * Whether an event is progress for the no-progress limit (K7): the admission (the clock starts),
 * streamed answer text (a finished paragraph, `model.output.paragraph`, or evidence of text still
 * streaming inside an unfinished one, `model.output.progress`), a completed turn with text that was not cut
 * at its length limit, a valid tool call (`tool.call.proposed`: the runtime proposes only valid
 * calls), a new receipt, an answered wait or a settled child (the Run was woken). Not progress:
 * lease grants (the transport of execution, renewed or not), model requests, failed or empty
 * turns, keep-alive chunks (never recorded), fences, dispatches. Pure; reads only the event.
 */
export function countsAsProgress(e: RunEvent): boolean {
  switch (e.type) {
    case 'run.admitted':
    case 'model.output.paragraph':
    case 'model.output.progress':
    case 'tool.call.proposed':
    case 'tool.call.receipt':
    case 'wait.answered':
    case 'child.run.settled':
      return true;
    case 'model.turn.completed':
      return e.data.content.trim().length > 0 && e.data.finishReason !== 'length';
    default:
      return false;
  }
}

/** The later of two ISO-8601 instants (`a` may be null). */
function laterOf(a: string | null, b: string): string {
  return a === null || Date.parse(b) > Date.parse(a) ? b : a;
}

/**
 * The Run's no-progress clock (K7) at `now`: when it last made progress, how long ago (ms), the
 * limit (`noProgressSeconds` of its admission, ms, or null when it has none) and whether the limit
 * is passed. A parked Run (waiting on a human or a child, K10) is never past it: the wait's own
 * expiry covers it, and its wake restarts the clock. Null before admission.
 */
export function noProgressClock(
  facts: RunFacts,
  now: Date,
): { lastProgressAt: string; sinceMs: number; limitMs: number | null; passed: boolean; dueAt: string | null } | null {
  if (!facts.admitted || !facts.lastProgressAt) return null;
  const sinceMs = Math.max(0, now.getTime() - Date.parse(facts.lastProgressAt));
  const seconds = facts.admitted.limits.noProgressSeconds;
  const limitMs = seconds === undefined ? null : seconds * 1000;
  const dueAt = limitMs === null ? null : new Date(Date.parse(facts.lastProgressAt) + limitMs).toISOString();
  const passed = limitMs !== null && sinceMs >= limitMs && parkedOn(facts) === null;
  return { lastProgressAt: facts.lastProgressAt, sinceMs, limitMs, passed, dueAt };
}

/** The Run's latest model turn, or null before the first request. */
export function lastTurn(facts: RunFacts): TurnFacts | null {
  return facts.turns[facts.turns.length - 1] ?? null;
}

/** Tool calls in proposal order. */
export function toolCallsInOrder(facts: RunFacts): ToolCallFacts[] {
  return [...facts.toolCalls.values()].sort((a, b) => a.proposedSeq - b.proposedSeq);
}

/**
 * Usage totals recorded so far: model requests, dispatched tool calls, and the tokens MEASURED
 * (summed over turns whose usage the model reported). A requested turn whose usage is not known
 * (completed without a usage chunk, failed, cut, or never completed because the process died) is
 * counted in `unknownUsageTurns`, never as 0 tokens (K9, K10). A request never sent (`not-sent`)
 * is no model request and used nothing (K7).
 */
export function usageOf(facts: RunFacts): {
  modelRequests: number;
  toolCalls: number;
  promptTokens: number;
  completionTokens: number;
  unknownUsageTurns: number;
} {
  let promptTokens = 0;
  let completionTokens = 0;
  let unknownUsageTurns = 0;
  let notSent = 0;
  for (const t of facts.turns) {
    if (t.failed?.error.kind === 'not-sent') {
      notSent += 1;
      continue;
    }
    const u = t.completed?.usage;
    if (!u) {
      unknownUsageTurns += 1;
      continue;
    }
    promptTokens += u.promptTokens;
    completionTokens += u.completionTokens;
  }
  const toolCalls = [...facts.toolCalls.values()].filter((c) => c.dispatched).length;
  return { modelRequests: facts.turns.length - notSent, toolCalls, promptTokens, completionTokens, unknownUsageTurns };
}

/** What an event on the runtime subject does to {@link RunFacts.closesItself} (nothing on other subjects). */
function closesItselfAfter(facts: RunFacts, e: RunEvent): boolean {
  if (subjectTokenOf(e) !== 'runtime') return facts.closesItself;
  if (e.type !== 'run.execution.finished') return false;
  for (const c of facts.toolCalls.values()) if (!c.receipt) return false;
  return true;
}

/**
 * True when no executor append decided before a settlement can land after it, so the lifecycle
 * may settle (K6, K9): the execution closed itself ({@link RunFacts.closesItself}: a Run that
 * finished on its own, every proposed call with its receipt), or recovery fenced both executor
 * subjects ({@link RunFacts.closed}: a lost, canceled, late or stuck holder, or a Run that finished
 * with a call still in flight).
 */
export function closedForSettlement(facts: RunFacts): boolean {
  return facts.closesItself || (facts.closed.runtime && facts.closed.tools);
}

/** What an event on an executor subject does to its closure (see {@link RunFacts.closed}). */
function closedAfter(closed: RunFacts['closed'], e: RunEvent): RunFacts['closed'] {
  const token = subjectTokenOf(e);
  if ((token !== 'runtime' && token !== 'tools') || e.type === 'tool.call.late_observed') return closed;
  return { ...closed, [token]: e.type === 'run.fenced' };
}

/** Committed passages (latest version of each) in the order of their source turn, then index. */
export function passagesInOrder(facts: RunFacts): EventData<'passage.committed'>[] {
  return [...facts.passages.values()].sort((a, b) => a.sourceTurn - b.sourceTurn || a.index - b.index);
}

/**
 * The passages an observer is shown as the Run's answer: once `answer.published` is recorded,
 * exactly the passages it lists, in its order; before that (the answer still streaming, or the
 * Run interrupted, canceled or failed without one), every committed passage in the order of
 * {@link passagesInOrder}, so text committed while a turn streamed is served as it was committed.
 */
export function answerPassages(facts: RunFacts): EventData<'passage.committed'>[] {
  if (!facts.answer) return passagesInOrder(facts);
  return facts.answer.passageIds.map((id) => facts.passages.get(id)).filter((p) => p !== undefined);
}

/** Recorded paragraphs (`model.output.paragraph`) whose passage publication has not committed yet: `[turn, index]` pairs. */
export function uncommittedParagraphs(facts: RunFacts): { turn: number; index: number }[] {
  const committed = new Set([...facts.passages.values()].map((p) => `${p.sourceTurn}/${p.index}`));
  return facts.turns.flatMap((t) =>
    t.paragraphs.filter((p) => !committed.has(`${t.turn}/${p.index}`)).map((p) => ({ turn: t.turn, index: p.index })),
  );
}

/** Waits not answered yet (whether or not expired: the expiry is judged against a clock by the deciders). */
export function unansweredWaits(facts: RunFacts): WaitFacts[] {
  return [...facts.waits.values()].filter((w) => !w.answer);
}

/** Child Runs whose settlement is not recorded on this Run yet. */
export function pendingChildren(facts: RunFacts): ChildFacts[] {
  return [...facts.children.values()].filter((c) => !c.result);
}

/**
 * Why the Run is parked (K10): `awaiting_human` while a wait is unanswered, `awaiting_child`
 * while a child Run has not settled, null otherwise (also once the Run finished, is fenced or
 * settled). A parked Run holds no lease and nothing executes it until its wake is recorded.
 */
export function parkedOn(facts: RunFacts): 'awaiting_human' | 'awaiting_child' | null {
  if (facts.finished || facts.fenced || facts.settled) return null;
  if (unansweredWaits(facts).length > 0) return 'awaiting_human';
  if (pendingChildren(facts).length > 0) return 'awaiting_child';
  return null;
}

/**
 * What the Run stopped at when it last parked, whatever its wake's state (K10): `awaiting_human` /
 * `awaiting_child` when its last model turn is completed and opened a wait or requested a child
 * (answered, settled or not) and no model turn was requested after it, the Run not finished,
 * fenced or settled; null otherwise. Nothing has executed since that park (the turn's other
 * proposals are decided again from the log by the next holder), so a holder lost from here loses
 * nothing: recovery treats its lease as parked instead of fencing the Run, and the wake, recorded
 * already or to come, continues the Run at the next epoch. Once a woken holder requests the next
 * turn, the Run executes again and a lost holder is fenced as usual (`interrupted`).
 */
export function parkedAtLastTurn(facts: RunFacts): 'awaiting_human' | 'awaiting_child' | null {
  if (facts.finished || facts.fenced || facts.settled) return null;
  const last = lastTurn(facts);
  if (!last?.completed) return null;
  if ([...facts.waits.values()].some((w) => w.turn === last.turn)) return 'awaiting_human';
  if ([...facts.children.values()].some((c) => c.turn === last.turn)) return 'awaiting_child';
  return null;
}

/**
 * True when the log says a runtime holding lease `epoch` may write nothing more for the Run (K6):
 * recovery closed that epoch (or a later one) with `lease.parked`, its holder handed the Run over
 * at that epoch (or a later one: `run.handed_over`), or a later epoch was granted.
 */
export function epochSuperseded(facts: RunFacts, epoch: number): boolean {
  return facts.parkedEpoch >= epoch || (facts.handedOver?.epoch ?? 0) >= epoch || facts.leases.some((l) => l.epoch > epoch);
}

/**
 * The epoch a handed-over Run may be taken from (K10: the handover is the wake): the epoch of its
 * latest `run.handed_over` when nothing ended the Run since (not finished, fenced, settled or
 * canceled) and no later epoch was granted; null otherwise. A runtime takes the lease released
 * `handover` at exactly that epoch, at `epoch + 1`, by compare-and-set.
 */
export function handedOverAt(facts: RunFacts): number | null {
  const h = facts.handedOver;
  if (!h || facts.finished || facts.fenced || facts.settled || facts.cancelRequested) return null;
  if (facts.leases.some((l) => l.epoch > h.epoch)) return null;
  return h.epoch;
}

/**
 * What the Run's children were carved from its limits (K7): the sum of their model requests and
 * tool calls. The parent is charged with the whole carve, whatever the child uses: nothing comes back.
 */
export function carvedForChildren(facts: RunFacts): {
  modelRequests: number;
  toolCalls: number;
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
} {
  let modelRequests = 0;
  let toolCalls = 0;
  let inputTokens = 0;
  let outputTokens = 0;
  let costMicros = 0;
  for (const c of facts.children.values()) {
    modelRequests += c.limits.maxModelRequests;
    toolCalls += c.limits.maxToolCalls;
    inputTokens += c.limits.maxInputTokens ?? 0;
    outputTokens += c.limits.maxOutputTokens ?? 0;
    costMicros += c.limits.maxCost?.micros ?? 0;
  }
  return { modelRequests, toolCalls, inputTokens, outputTokens, costMicros };
}

/**
 * What `tokens` tokens cost at `microsPerMTok` (micro-units per million tokens), whole
 * micro-units rounded up (K7: integers on the ledger, never under-charged). Exact for every
 * product below 2^53 (tokens x price up to 9e15: e.g. 10^7 tokens at 900 units per million).
 */
export function tokensCostMicros(tokens: number, microsPerMTok: number): number {
  return Math.ceil((tokens * microsPerMTok) / 1_000_000);
}

/**
 * The money reservation of a model request (K7): its input estimate at the input price plus its
 * `max_tokens` at the output price, micro-units.
 */
export function reservationMicros(price: TokenPrice, inputTokens: number, maxTokens: number): number {
  return tokensCostMicros(inputTokens, price.inputMicrosPerMTok) + tokensCostMicros(maxTokens, price.outputMicrosPerMTok);
}

/**
 * What one model turn cost (`TurnCost`, K7), from its request's price and reservation
 * (`model.turn.requested` `price`) and its outcome, or null when the request carried no price.
 * The one place where usage becomes money: the runtime records this on the turn's outcome, and
 * {@link budgetOf} sums it. Usage reported: measured at the price, nothing unknown. Otherwise the
 * turn's cost is unknown, between 0 and its reservation (`unknownMaxMicros`), never 0: the whole
 * reservation while in flight, after a reply without usage, a timeout, a connection loss or an
 * invalid reply; its input part only when the provider generated nothing (an HTTP error reply, a
 * refused connection); nothing for a request never sent (`not-sent`).
 */
export function turnCostOf(
  request: EventData<'model.turn.requested'>,
  completed: EventData<'model.turn.completed'> | null,
  failed: EventData<'model.turn.failed'> | null,
): TurnCost | null {
  const price = request.price;
  if (!price) return null;
  const u = completed?.usage;
  if (u) {
    const measuredMicros =
      tokensCostMicros(u.promptTokens, price.inputMicrosPerMTok) + tokensCostMicros(u.completionTokens, price.outputMicrosPerMTok);
    return { currency: price.currency, measuredMicros, unknownMaxMicros: 0 };
  }
  let unknownMaxMicros = price.reservedMicros;
  if (failed?.error.kind === 'not-sent') unknownMaxMicros = 0;
  else if (failed?.error.kind === 'http' || failed?.error.refused)
    unknownMaxMicros = Math.min(price.reservedMicros, tokensCostMicros(request.inputTokensEstimate ?? 0, price.inputMicrosPerMTok));
  return { currency: price.currency, measuredMicros: 0, unknownMaxMicros };
}

/** Characters per token of the ledger's estimates (K7): a flagged estimate, never a measurement. */
export const CHARS_PER_TOKEN = 4;

/** Fixed prompt overhead of a request (system prompt and tool definitions), tokens, in the estimates. */
export const PROMPT_OVERHEAD_TOKENS = 600;

/**
 * Estimated prompt tokens of the Run's next model request, from its facts alone (so the decider
 * can reserve it, K7): characters / {@link CHARS_PER_TOKEN} of the question, every completed
 * turn's text and call arguments, and every receipt (inline results as JSON; a stored result by
 * its recorded size), plus {@link PROMPT_OVERHEAD_TOKENS}.
 */
export function estimateInputTokens(facts: RunFacts): number {
  let chars = facts.admitted?.message.content.length ?? 0;
  for (const t of facts.turns) {
    const done = t.completed;
    if (!done) continue;
    chars += done.content.length;
    for (const c of done.toolCalls) chars += c.name.length + c.argumentsText.length + 40;
  }
  for (const c of facts.toolCalls.values()) {
    const r = c.receipt;
    if (!r) continue;
    chars += r.resultRef ? r.resultRef.bytes : JSON.stringify(r.result ?? r.error ?? null).length + 40;
  }
  return PROMPT_OVERHEAD_TOKENS + Math.ceil(chars / CHARS_PER_TOKEN);
}

/** A ledger line: what a limit allows, what was used, what is left (K7). Token lines split measured from estimated use. */
export interface LedgerLine {
  /** The limit, or null when the Run has none for this line. */
  limit: number | null;
  /** Used by this Run's own requests or calls (measured plus estimated, for tokens). */
  used: number;
  /** Carved out for child Runs (charged in full, whatever the child uses). */
  carved: number;
  /** Kept for the finalization request; research cannot spend it. */
  reserve: number;
  /** What research may still spend: `limit - reserve - used - carved` (>= 0), or null without a limit. */
  researchLeft: number | null;
  /** What is left including the reserve: `limit - used - carved` (>= 0), or null without a limit. */
  left: number | null;
}

/** The Run's budget ledger (see {@link budgetOf}). */
export interface Ledger {
  modelRequests: LedgerLine;
  toolCalls: LedgerLine;
  inputTokens: LedgerLine & { measured: number; estimated: number };
  outputTokens: LedgerLine & { measured: number; estimated: number };
  /**
   * Money (K7), micro-units of `currency`: `used` is `measured` (usage reported, at the price its
   * request recorded) plus `unknownMax` (the upper bound of every turn whose usage is unknown or in
   * flight, `turnCostOf`): the Run cost between `measured` and `used`. The limit is `maxCost`
   * (null: not limited by money); no part of it is kept for finalization. `currency`: the limit's,
   * else the priced turns', else null.
   */
  cost: LedgerLine & { measured: number; unknownMax: number; currency: string | null };
  /** Requests whose token usage the model did not report: their tokens are in `estimated`, flagged (K7, K9). */
  unknownUsageTurns: number;
  /** True once the Run moved into finalization-only (then only the reserve may be spent). */
  finalizing: boolean;
}

/**
 * The Run's one budget ledger (K7), a pure fold of its facts: model requests (every requested
 * turn counts, retries included), tool calls (dispatched: the tools deny the rest), input and output tokens,
 * the final-output reserve and what was carved for children. Tokens are MEASURED where the model
 * reported usage; a turn without usage (no usage chunk, failed, cut, never ended) is charged an
 * ESTIMATE, flagged in `estimated` and `unknownUsageTurns`, never 0 measured: its reservation
 * (`inputTokensEstimate`, and `maxTokens` when it may have generated: a timeout, a connection
 * loss, a process that died) or, for a reply received without usage, its text's length / 4. An
 * HTTP error reply, or a refused connection (`refused`: the request never reached the provider),
 * is charged its input estimate only (the provider generated nothing). A request
 * never sent (`not-sent`: the limiter's pause ends after the deadline) is charged nothing, neither
 * tokens nor a model request: the provider received nothing.
 */
export function budgetOf(facts: RunFacts): Ledger {
  const limits = facts.admitted?.limits;
  const carved = carvedForChildren(facts);
  let inMeasured = 0;
  let inEstimated = 0;
  let outMeasured = 0;
  let outEstimated = 0;
  let unknownUsageTurns = 0;
  let notSent = 0;
  let costMeasured = 0;
  let costUnknown = 0;
  let costCurrency: string | null = limits?.maxCost?.currency ?? null;
  for (const t of facts.turns) {
    const cost = turnCostOf(t.request, t.completed, t.failed);
    if (cost) {
      costMeasured += cost.measuredMicros;
      costUnknown += cost.unknownMaxMicros;
      costCurrency ??= cost.currency;
    }
    if (t.failed?.error.kind === 'not-sent') {
      notSent += 1;
      continue;
    }
    const u = t.completed?.usage;
    if (u) {
      inMeasured += u.promptTokens;
      outMeasured += u.completionTokens;
      continue;
    }
    unknownUsageTurns += 1;
    inEstimated += t.request.inputTokensEstimate ?? 0;
    if (t.completed) {
      const chars = t.completed.content.length + t.completed.toolCalls.reduce((n, c) => n + c.name.length + c.argumentsText.length, 0);
      outEstimated += Math.ceil(chars / CHARS_PER_TOKEN);
    } else if (!(t.failed?.error.kind === 'http' || t.failed?.error.refused)) outEstimated += t.request.maxTokens ?? 0;
  }
  const dispatchedCalls = [...facts.toolCalls.values()].filter((c) => c.dispatched).length;
  const reserve = limits?.finalOutputReserve;
  const line = (limit: number | undefined, used: number, carvedN: number, reserveN: number): LedgerLine => ({
    limit: limit ?? null,
    used,
    carved: carvedN,
    reserve: limit === undefined ? 0 : reserveN,
    researchLeft: limit === undefined ? null : Math.max(0, limit - reserveN - used - carvedN),
    left: limit === undefined ? null : Math.max(0, limit - used - carvedN),
  });
  return {
    modelRequests: line(limits?.maxModelRequests, facts.turns.length - notSent, carved.modelRequests, reserve?.modelRequests ?? 0),
    toolCalls: line(limits?.maxToolCalls, dispatchedCalls, carved.toolCalls, 0),
    inputTokens: { ...line(limits?.maxInputTokens, inMeasured + inEstimated, carved.inputTokens, 0), measured: inMeasured, estimated: inEstimated },
    outputTokens: {
      ...line(limits?.maxOutputTokens, outMeasured + outEstimated, carved.outputTokens, reserve?.outputTokens ?? 0),
      measured: outMeasured,
      estimated: outEstimated,
    },
    cost: {
      ...line(limits?.maxCost?.micros, costMeasured + costUnknown, carved.costMicros, 0),
      measured: costMeasured,
      unknownMax: costUnknown,
      currency: costCurrency,
    },
    unknownUsageTurns,
    finalizing: facts.finalization !== null,
  };
}

/**
 * The `default` of a decider's `switch (trigger.type)`: the compiler checks that every trigger
 * type has its case (`trigger` is `never` there); at run time an unknown trigger is a bug.
 * @throws Error naming the owner and the trigger.
 */
export function unknownTrigger(owner: string, trigger: never): never {
  throw new Error(`${owner}: unknown trigger ${JSON.stringify(trigger)}`);
}

export * from './honesty.js';
