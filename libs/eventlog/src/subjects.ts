/**
 * Subject layout (docs/event-log.md): one JetStream stream captures `<prefix>.run.>`; each Run
 * has one subject per owner, `<prefix>.run.<runId>.<owner>`. So
 * - `<prefix>.run.<runId>.>` reads one Run's events in order (its stream);
 * - the owner of every fact is visible in its subject (and the broker can permit each service to
 *   publish only to `*.run.*.<owner>`: K9);
 * - fencing is a conditional append on the exact subject the writer owns (NATS 2.9 ignores the
 *   wildcard expectation header, STACK-NOTES).
 * Token deltas travel live on core NATS `<prefix>.live.<runId>.delta` and are never stored.
 */
import type { Owner } from '@runplane/contracts';

export interface SubjectSpace {
  stream: string;
  prefix: string;
}

export const runSubject = (s: SubjectSpace, runId: string, owner: Owner): string => `${s.prefix}.run.${runId}.${owner}`;
export const runFilter = (s: SubjectSpace, runId: string): string => `${s.prefix}.run.${runId}.>`;
export const allRunsFilter = (s: SubjectSpace): string => `${s.prefix}.run.>`;
export const ownerFilter = (s: SubjectSpace, owner: Owner): string => `${s.prefix}.run.*.${owner}`;
export const liveDeltaSubject = (s: SubjectSpace, runId: string): string => `${s.prefix}.live.${runId}.delta`;
/**
 * Core NATS subject on which one runtime process is told, at once, that a Run whose lease it holds
 * was woken on another replica (`<prefix>.nudge.runtime.<instance>`, payload: the Run id). Never
 * stored: an optimisation of latency; the holder's renewal tick still wakes every held Run.
 */
export const runtimeNudgeSubject = (s: Pick<SubjectSpace, 'prefix'>, instance: string): string => `${s.prefix}.nudge.runtime.${instance}`;
/** Every runtime's nudge subject (the runtime user's permissions). */
export const runtimeNudgeFilter = (s: Pick<SubjectSpace, 'prefix'>): string => `${s.prefix}.nudge.runtime.*`;
