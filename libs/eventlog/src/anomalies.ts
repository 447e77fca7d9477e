/**
 * Counts of anomalies this process met on the bus: messages on Run subjects that are not facts
 * (garbage, forgeries, replays) and events that cannot apply (a forged event of a Run that was never
 * admitted). Each is terminated or skipped once and logged; the counts are where a metrics
 * endpoint reads them (`runplane_bus_anomalies_total{kind}`), and every anomaly log line carries
 * the running total of its kind.
 */

/** What was wrong with a message. */
export type AnomalyKind =
  /** Not JSON, not a Runplane event, or its owner / Run disagree with its subject. */
  | 'invalid-message'
  /** A well-formed event that the event log did not append (no verified back-link): a replay or a forgery. */
  | 'unverified-event'
  /** A copy of an event already stored earlier on the Run (read back twice). */
  | 'duplicate-event'
  /** A well-formed event that cannot apply (e.g. of a Run that was never admitted). */
  | 'inapplicable-event'
  /** A hole in a Run's projection: an event's back-link names one the projection never applied (K11; the projector re-projects the Run). */
  | 'projection-gap'
  /** A message on a partition that is not its Run's (`partitionOf`): not appended by the event log (a forgery). */
  | 'wrong-partition'
  /** With public keys configured: an event without a signature (signing.ts), written by a writer without its owner's key. */
  | 'unsigned-event'
  /** With public keys configured: a signature that does not verify, or by a key the set does not hold. */
  | 'bad-signature'
  /** With public keys configured: a valid signature of an owner who may not write the event's type. */
  | 'wrong-signer';

const counts = new Map<AnomalyKind, number>();

/** Counts one anomaly of `kind`; returns the new total of that kind in this process. */
export function recordAnomaly(kind: AnomalyKind): number {
  const n = (counts.get(kind) ?? 0) + 1;
  counts.set(kind, n);
  return n;
}

/** The totals so far in this process, by kind. */
export function anomalyCounts(): Partial<Record<AnomalyKind, number>> {
  return Object.fromEntries(counts);
}
