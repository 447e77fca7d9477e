/**
 * The fold of one Run's events, in stream order, into its facts. Every owner decides its next
 * step from this fold (`decide(facts, ...) -> events`), never from in-memory state, so a
 * restarted or redelivered handler reaches the same decision (K10, K11).
 */
import { subjectTokenOf, type EventData, type Owner, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { countsAsProgress } from './clocks.js';

export interface TurnFacts {
  turn: number;
  requestedAt: string;
  /** The request as recorded: its reservation (`maxTokens`, `inputTokensEstimate`), `purpose`, `retryOf` (K7). */
  request: EventData<'model.turn.requested'>;
  /** The turn's outcome: its first `model.turn.completed` or `model.turn.failed` (a later one is not a second outcome, K7); null while in flight. */
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
   * its first event under it; in older logs, by recovery.
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
   * True while the execution closed itself, with no fence (recovery off the happy path): the runtime subject's last
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
      if (facts.turns.some((x) => x.turn === e.data.turn)) break; // the first request of a turn is its request (K7: charged once)
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
      // the first outcome of a turn is its outcome (K7: the ledger charges it once, as the projections do)
      const known = facts.turns.find((x) => x.turn === e.data.turn);
      if (known && !known.completed && !known.failed) {
        const t = turn(e.data.turn)!;
        t.completed = e.data;
        t.completedAt = e.occurredAt;
      }
      break;
    }
    case 'model.turn.failed': {
      const known = facts.turns.find((x) => x.turn === e.data.turn);
      if (known && !known.completed && !known.failed) turn(e.data.turn)!.failed = e.data;
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
      // the first settlement is the Run's outcome (K9); a later one (only a forger with the
      // lifecycle's key can append it) is ignored here as by the projection and the consumers, and
      // named by the audit
      next.settled ??= { ...e.data, at: e.occurredAt };
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

/** The later of two ISO-8601 instants (`a` may be null). */
function laterOf(a: string | null, b: string): string {
  return a === null || Date.parse(b) > Date.parse(a) ? b : a;
}

/** What an event on the runtime subject does to {@link RunFacts.closesItself} (nothing on other subjects). */
function closesItselfAfter(facts: RunFacts, e: RunEvent): boolean {
  if (subjectTokenOf(e) !== 'runtime') return facts.closesItself;
  if (e.type !== 'run.execution.finished') return false;
  for (const c of facts.toolCalls.values()) if (!c.receipt) return false;
  return true;
}

/** What an event on an executor subject does to its closure (see {@link RunFacts.closed}). */
function closedAfter(closed: RunFacts['closed'], e: RunEvent): RunFacts['closed'] {
  const token = subjectTokenOf(e);
  if ((token !== 'runtime' && token !== 'tools') || e.type === 'tool.call.late_observed') return closed;
  return { ...closed, [token]: e.type === 'run.fenced' };
}
