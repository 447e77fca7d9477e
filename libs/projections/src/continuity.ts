/**
 * The continuity check of a Run's projection (K11): pure rules over the back-links the log
 * already carries. Every stored event records `prevSeq`, the last sequence of its own subject
 * that its conditional append expected and the server verified (libs/eventlog `verifyStored`), so
 * each subject of a Run (`<prefix>.run.<runId>.<owner>.<partition>`) is a chain. A projection that keeps, per
 * subject, the last sequence it applied can tell an event that continues the chain from one that
 * was already applied (a redelivery) and from one that shows a hole (an event of the Run it never
 * applied): never a silent skip.
 */
import type { StoredEvent } from '@runplane/contracts';

/** Last stream sequence applied per subject token of one Run (`admission`, `runtime`, ...): absent = none. */
export type SubjectSeqs = Readonly<Record<string, number>>;

/** What a projection knows of one Run: its checkpoint (`runs.last_seq`) and the last sequence applied per subject. */
export interface RunCheckpoint {
  lastSeq: number;
  subjectSeqs: SubjectSeqs;
}

/**
 * A hole in a Run's projection: `event` cannot be applied in stream order because an event of the
 * Run was not applied before it.
 * - `missing-earlier`: the event's back-link (`seenPrevSeq`) names a sequence of its subject the
 *   projection never applied (it applied up to `expectedPrevSeq` there);
 * - `applied-out-of-order`: the event continues its subject's chain, but the projection already
 *   applied a later event of the Run (`lastSeq` > `seq`): it was passed over.
 */
export interface ProjectionGap {
  runId: string;
  subject: string;
  seq: number;
  eventType: string;
  kind: 'missing-earlier' | 'applied-out-of-order';
  /** The subject's last sequence the projection applied (0 = none). */
  expectedPrevSeq: number;
  /** The back-link the event carries (`prevSeq`). */
  seenPrevSeq: number;
  /** The Run's checkpoint when the gap was seen. */
  lastSeq: number;
}

/** The verdict on one event: apply it (`next`), it was applied already (`applied`), or a `gap`. */
export type Continuity = { kind: 'next' } | { kind: 'applied' } | { kind: 'gap'; gap: ProjectionGap };

/** The owner token of a stored event's subject (`runtime` of `rp.run.r1.runtime.5`): the chain it belongs to. */
export const subjectTokenOfStored = (stored: StoredEvent): string => stored.subject.split('.')[3] ?? '';

/**
 * Decides whether `stored` continues its Run's projection `at` (K11):
 * - `applied` when its subject already applied it or a later event of that subject (a redelivery);
 * - `next` when its back-link names the subject's last applied sequence and it is past the Run's
 *   checkpoint (stream order holds);
 * - `gap` otherwise (see {@link ProjectionGap}).
 * An event without `prevSeq` (appended before back-links existed) cannot be checked: it is
 * `applied` at or below the checkpoint, else `next` (the rule before the check).
 */
export function continuityOf(at: RunCheckpoint, stored: StoredEvent): Continuity {
  const subject = subjectTokenOfStored(stored);
  const applied = at.subjectSeqs[subject] ?? 0;
  if (stored.seq <= applied) return { kind: 'applied' };
  const prevSeq = stored.event.prevSeq;
  if (prevSeq === undefined) return stored.seq <= at.lastSeq ? { kind: 'applied' } : { kind: 'next' };
  if (prevSeq === applied && stored.seq > at.lastSeq) return { kind: 'next' };
  return {
    kind: 'gap',
    gap: {
      runId: stored.event.runId,
      subject: stored.subject,
      seq: stored.seq,
      eventType: stored.event.type,
      kind: prevSeq === applied ? 'applied-out-of-order' : 'missing-earlier',
      expectedPrevSeq: applied,
      seenPrevSeq: prevSeq,
      lastSeq: at.lastSeq,
    },
  };
}

/** The subject sequences after applying `stored` on top of `seqs` (a new object). */
export function advanceSubjectSeqs(seqs: SubjectSeqs, stored: StoredEvent): SubjectSeqs {
  return { ...seqs, [subjectTokenOfStored(stored)]: stored.seq };
}

/**
 * How far a read of one Run's log is complete. A reader reads each subject of the Run on its own
 * (a direct get of its last message, then back-links), so the subjects are seen at slightly
 * different moments: an event appended on one subject between those moments can be missing
 * while a later event of another subject is there. `first` is each subject's last sequence as
 * the read saw it, `confirmed` each subject's last sequence looked up again after the read, and
 * `storedBefore` a sequence known to be stored before the read began (the delivery that woke
 * it). A subject that moved meanwhile may hide an event above both its first last and
 * `storedBefore`; every event at or below the lowest such sequence was read.
 * @returns the highest sequence up to which the read holds every event of the Run (`Infinity`
 *   when no subject moved).
 */
export function completeUpTo(first: SubjectSeqs, confirmed: SubjectSeqs, storedBefore: number): number {
  let bound = Infinity;
  for (const [subject, seq] of Object.entries(confirmed)) {
    const before = first[subject] ?? 0;
    if (seq !== before) bound = Math.min(bound, Math.max(before, storedBefore));
  }
  return bound;
}
