/**
 * The recovery decider: `decide(facts, trigger, now) -> RunEvent[]`, pure.
 * - `LeaseObserved`: a runtime instance took the Run's execution lease: record the grant
 *   (`lease.granted`, once per epoch), unless the Run is already settled (K6).
 * - `LeaseLost`: the holder is gone (its lease expired, or it released the lease while stopping
 *   with the Run unfinished): fence the execution with one `run.fenced` marker on each executor's
 *   own subject (`runtime`, `tools`), so that every later conditional append of the stale holder
 *   fails at the log whatever it believes (K6), naming what was in flight and so has no known
 *   outcome (a model turn without its outcome, a dispatched tool call without its receipt: K5).
 *   The lifecycle then settles the Run `interrupted` (K10). Nothing when the execution already
 *   stopped on its own, the Run is settled, or it is already fenced.
 */
import { contextFrom, makeEvent, type FenceReason, type RunEvent, type UncertainStep } from '@runplane/contracts';
import { lastTurn, toolCallsInOrder, unknownTrigger, type RunFacts } from '@runplane/run-facts';

/** The holder of a lease: the runtime process that wrote under it. */
export interface Holder {
  service: string;
  instance: string;
}

export type RecoveryTrigger =
  | { type: 'LeaseObserved'; epoch: number; holder: Holder; ttlMs: number }
  | { type: 'LeaseLost'; epoch: number; holder: Holder; reason: FenceReason; detail: string };

/** Decides recovery's events for a trigger (see the module comment). */
export function decide(facts: RunFacts, trigger: RecoveryTrigger, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent || facts.settled) return [];
  switch (trigger.type) {
    case 'LeaseObserved':
      if (facts.leases.some((l) => l.epoch === trigger.epoch)) return [];
      return [
        makeEvent(
          'lease.granted',
          contextFrom(facts.lastEvent),
          `lease/${trigger.epoch}`,
          { epoch: trigger.epoch, holder: trigger.holder, ttlMs: trigger.ttlMs },
          now,
        ),
      ];
    case 'LeaseLost': {
      if (facts.finished || facts.fenced) return [];
      const uncertain = uncertainSteps(facts);
      const ctx = contextFrom(facts.lastEvent);
      const data = { epoch: trigger.epoch, holder: trigger.holder, reason: trigger.reason, detail: trigger.detail, uncertain };
      return (['runtime', 'tools'] as const).map((fencedSubject) =>
        makeEvent('run.fenced', ctx, `fence/${trigger.epoch}/${fencedSubject}`, { fencedSubject, ...data }, now),
      );
    }
    default:
      return unknownTrigger('recovery', trigger);
  }
}

/** What the execution had started without a recorded outcome. */
export function uncertainSteps(facts: RunFacts): UncertainStep[] {
  const out: UncertainStep[] = [];
  const last = lastTurn(facts);
  if (last && !last.completed && !last.failed) out.push({ kind: 'model-turn', turn: last.turn });
  for (const call of toolCallsInOrder(facts)) {
    if (call.dispatched && !call.receipt) out.push({ kind: 'tool-call', toolCallId: call.toolCallId, name: call.name });
  }
  return out;
}
