/**
 * Publication rules: when the runtime stops with an answer, the answer turn's text is committed
 * as passages (split on blank lines), each with a version, then `answer.published` marks the
 * answer whole. Committed passages are never erased by a later failure (K9).
 */
import { contextFrom, deterministicId, makeEvent, sha256Hex, type RunEvent } from '@runplane/contracts';
import { unknownTrigger, type RunFacts } from '@runplane/run-facts';

/** Splits answer text into passages: paragraphs separated by blank lines, trimmed, none empty. */
export function splitPassages(text: string): string[] {
  return text
    .replace(/\r\n/g, '\n')
    .split(/\n[ \t]*\n/)
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
}

/** Stable passage id: the same Run and position give the same id on every retry. */
export function passageIdFor(runId: string, index: number): string {
  return deterministicId(runId, 'passage', index);
}

/** What wakes publication: the runtime stopped (`run.execution.finished`). */
export type PublicationTrigger = { type: 'Wake' };

/**
 * Decides the passage commits still missing for an answered Run, then `answer.published`.
 * Returns nothing when the runtime has not stopped with an answer, or publication is done.
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

function publish(facts: RunFacts, now: Date): RunEvent[] {
  const finished = facts.finished;
  if (!finished || finished.reason !== 'answered' || finished.answerTurn === null || facts.answer || !facts.lastEvent) return [];
  const turn = facts.turns.find((t) => t.turn === finished.answerTurn)?.completed;
  if (!turn) return [];
  const ctx = contextFrom(facts.lastEvent);
  const texts = splitPassages(turn.content);
  const events: RunEvent[] = [];
  texts.forEach((text, index) => {
    const passageId = passageIdFor(facts.runId, index);
    if (facts.passages.has(passageId)) return;
    events.push(
      makeEvent(
        'passage.committed',
        ctx,
        `${index}/v1`,
        {
          passageId,
          index,
          version: 1,
          text,
          sourceTurn: finished.answerTurn!,
          sha256: sha256Hex(text),
        },
        now,
      ),
    );
  });
  if (texts.length === 0) return events;
  events.push(
    makeEvent(
      'answer.published',
      ctx,
      'answer',
      {
        passageIds: texts.map((_, i) => passageIdFor(facts.runId, i)),
        characters: texts.reduce((n, t) => n + t.length, 0),
        sourceTurn: finished.answerTurn,
      },
      now,
    ),
  );
  return events;
}
