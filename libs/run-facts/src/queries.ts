/**
 * Queries over a Run's facts (pure): its turns, tool calls, passages, parking, lease epochs and
 * closure, read by the deciders, the projections' readers and the auditor.
 */
import type { EventData } from '@runplane/contracts';
import type { ChildFacts, RunFacts, ToolCallFacts, TurnFacts, WaitFacts } from './fold.js';

/** The Run's latest model turn, or null before the first request. */
export function lastTurn(facts: RunFacts): TurnFacts | null {
  return facts.turns[facts.turns.length - 1] ?? null;
}

/** Tool calls in proposal order. */
export function toolCallsInOrder(facts: RunFacts): ToolCallFacts[] {
  return [...facts.toolCalls.values()].sort((a, b) => a.proposedSeq - b.proposedSeq);
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
 * The `default` of a decider's `switch (trigger.type)`: the compiler checks that every trigger
 * type has its case (`trigger` is `never` there); at run time an unknown trigger is a bug.
 * @throws Error naming the owner and the trigger.
 */
export function unknownTrigger(owner: string, trigger: never): never {
  throw new Error(`${owner}: unknown trigger ${JSON.stringify(trigger)}`);
}
