/**
 * Which log a projection database was built from (K11: projections are rebuilt from the event log
 * they were built from). A database that holds Runs of another log (a store replaced under the
 * same database, a projector pointed at the wrong database) would serve Runs the log does not have
 * and hide nothing wrong until a rebuild or an audit compares them; the projector refuses to start
 * on one instead (apps/projector projection-source.ts).
 */
import type { EntityManager } from '@mikro-orm/postgresql';
import { parseRunSubject, type EventLog } from '@runplane/eventlog';

/** The Run projected last: its id and the stream sequence of the last event applied to it. */
export interface LatestProjectedRun {
  runId: string;
  lastSeq: number;
}

/** The Run with the highest `last_seq` in table `runs`, or null when no Run is projected. */
export async function latestProjectedRun(em: Pick<EntityManager, 'execute'>): Promise<LatestProjectedRun | null> {
  const rows = await em.execute<{ runId: string; lastSeq: number }[]>(
    'select "run_id" as "runId", "last_seq"::float8 as "lastSeq" from "runs" order by "last_seq" desc limit 1',
  );
  return rows[0] ?? null;
}

/**
 * Whether `latest` (the Run projected last, {@link latestProjectedRun}) came from `log`: the
 * message `log` stores at its `lastSeq` must be on that Run's subjects. A log that has no message
 * there (a younger log) or another Run's (another log) did not build this database.
 * @returns null when they agree (or nothing is projected yet); else one sentence saying what was
 *   found, for the error that stops the projector.
 * @throws what reading the log throws (NATS unreachable): the caller cannot tell yet.
 */
export async function projectionsFromAnotherLog(
  latest: LatestProjectedRun | null,
  log: Pick<EventLog, 'readMessage' | 'space'>,
): Promise<string | null> {
  if (!latest) return null;
  const msg = await log.readMessage({ seq: latest.lastSeq });
  const runId = msg ? parseRunSubject(log.space.prefix, msg.subject)?.runId : undefined;
  if (runId === latest.runId) return null;
  const found = !msg ? 'no message there' : runId ? `an event of Run ${runId} there` : `a message on ${msg.subject} there`;
  return (
    `the projection database holds Runs of another log: its last projected Run ${latest.runId} was applied up to stream sequence ` +
    `${latest.lastSeq}, but stream ${log.space.stream} has ${found}`
  );
}
