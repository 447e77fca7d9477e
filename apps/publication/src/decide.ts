/**
 * Publication rules. Passages are committed while the answer streams: each paragraph the runtime
 * recorded (`model.output.paragraph`, a paragraph followed by a blank line) is committed as a
 * passage at once, keyed by its turn and index. When the runtime stops with an answer, the answer
 * turn's text is split on blank lines and every passage still missing is committed; one whose
 * final text differs from what was committed while streaming is committed again as the next
 * version (never silently replaced); then `answer.published` lists the answer's passages.
 * Committed passages are never erased by a later failure (K9), and nothing is appended after the
 * Run's settlement.
 *
 * The answer's machine-readable list of what it left unanswered (its `runplane-unanswered` block,
 * `splitUnanswered`) is recorded on `answer.published` (`unanswered`, [] when the answer lists
 * nothing or has no block) and kept out of the published passages: the answer's prose says the
 * same in words. An answer that is nothing but the block keeps it as its text (never an empty
 * answer). The lifecycle settles a Run whose list is not empty `partial` (K9).
 *
 * A Run that ended asking the user a clarification (`clarification-requested`, K2) publishes the
 * question as its answer: the text of the asking turn, if any, then the question, with nothing
 * listed unanswered (the lifecycle settles it `completed`, the clarification pending).
 *
 * Text streamed in a turn that then proposes tool calls is committed like any other (nothing says
 * it is not answer text until the turn ends): it stays a committed passage of its turn, but it is
 * not part of the published answer, which lists only the answer turn's passages.
 */
import {
  contextFrom,
  deterministicId,
  makeEvent,
  sha256Hex,
  splitPassages,
  splitUnanswered,
  type EventData,
  type RunEvent,
  type UnansweredPart,
} from '@runplane/contracts';
import { unknownTrigger, type RunFacts } from '@runplane/run-facts';

export { splitPassages };

/** Stable passage id: the same Run, turn and position give the same id on every retry. */
export function passageIdFor(runId: string, turn: number, index: number): string {
  return deterministicId(runId, 'passage', turn, index);
}

/** What wakes publication: a paragraph was recorded, or the runtime stopped (`run.execution.finished`). */
export type PublicationTrigger = { type: 'Wake' };

/**
 * Decides the passage commits still missing (recorded paragraphs first, then, for an answered
 * Run, the rest of the answer turn), then `answer.published`. Nothing for a settled Run, or when
 * everything is committed and published.
 * @param now the decision clock (the events' `occurredAt`).
 */
export function decide(facts: RunFacts, trigger: PublicationTrigger, now: Date): RunEvent[] {
  switch (trigger.type) {
    case 'Wake':
      return publish(facts, now);
    default:
      return unknownTrigger('publication', trigger.type);
  }
}

type Passage = EventData<'passage.committed'>;

function publish(facts: RunFacts, now: Date): RunEvent[] {
  if (!facts.lastEvent || facts.settled || facts.answer) return [];
  const ctx = contextFrom(facts.lastEvent);
  const events: RunEvent[] = [];
  /** Versions decided in this call, over the Run's committed passages (not copied: a Run may have thousands, K8). */
  const decided = new Map<string, Passage>();
  const latestOf = (passageId: string) => decided.get(passageId) ?? facts.passages.get(passageId);
  /** Commits `text` at (turn, index) unless that exact text is its latest version already. */
  const commit = (turn: number, index: number, text: string) => {
    const passageId = passageIdFor(facts.runId, turn, index);
    const sha256 = sha256Hex(text);
    const before = latestOf(passageId);
    if (before?.sha256 === sha256) return;
    const version = (before?.version ?? 0) + 1;
    const data: Passage = { passageId, index, version, text, sourceTurn: turn, sha256 };
    decided.set(passageId, data);
    events.push(makeEvent('passage.committed', ctx, `${turn}/${index}/v${version}`, data, now));
  };
  // streamed paragraphs, at most once each (a later version comes only from the final text); found
  // by (turn, index) without deriving every paragraph's passage id on every wake (K8: linear, no hashing)
  const committed = new Set<string>();
  for (const p of facts.passages.values()) committed.add(`${p.sourceTurn}/${p.index}`);
  for (const t of facts.turns) {
    for (const p of t.paragraphs) if (!committed.has(`${t.turn}/${p.index}`)) commit(t.turn, p.index, p.text);
  }
  const finished = facts.finished;
  const clarifying = finished?.reason === 'clarification-requested';
  if (!finished || (finished.reason !== 'answered' && !clarifying) || finished.answerTurn === null) return events;
  const answerTurn = finished.answerTurn;
  const turn = facts.turns.find((t) => t.turn === answerTurn)?.completed;
  if (!turn) return events;
  const gaps = clarifying ? { text: turn.content, unanswered: [] } : splitUnanswered(turn.content);
  const withoutBlock = splitPassages(gaps.text);
  // a clarification's answer is the question the model asked the user (after any text of its turn), K2
  const question = clarifying ? [...facts.clarifications.values()].find((c) => c.turn === answerTurn)?.question : undefined;
  if (clarifying && question === undefined) return events;
  const texts = clarifying ? [...withoutBlock, ...splitPassages(question!)] : withoutBlock.length > 0 ? withoutBlock : splitPassages(turn.content);
  texts.forEach((text, index) => commit(answerTurn, index, text));
  if (texts.length === 0) return events;
  events.push(
    makeEvent(
      'answer.published',
      ctx,
      'answer',
      {
        passageIds: texts.map((_, i) => passageIdFor(facts.runId, answerTurn, i)),
        characters: texts.reduce((n, t) => n + t.length, 0),
        sourceTurn: answerTurn,
        unanswered: withUnfinished(gaps.unanswered ?? [], finished.unfinished ?? []),
      },
      now,
    ),
  );
  return events;
}

/**
 * The answer's own unanswered list plus what the runtime recorded as unfinished when it answered
 * in finalization-only (K9), de-duplicated by `part`: a finalization answer settles `partial` even
 * when the model's text lists nothing.
 */
function withUnfinished(listed: UnansweredPart[], unfinished: UnansweredPart[]): UnansweredPart[] {
  const all = [...listed, ...unfinished];
  return all.filter((p, i) => all.findIndex((q) => q.part === p.part) === i);
}
