/**
 * Tool dispatch rules. A proposed call moves to dispatched and then a receipt; nothing here ever
 * executes a call twice (K5):
 * - not in the Run's grant -> `denied` receipt, never dispatched;
 * - over the Run's tool-call limit -> `denied` receipt (first cut of K7);
 * - already dispatched but without a receipt (the executor died or lost the outcome) -> `unknown`
 *   receipt: never re-executed, never reported as success;
 * - otherwise -> dispatch, then execute.
 * A failed or denied call stops only its own effect; the Run goes on (K8).
 */
import { toolCallsInOrder, type RunFacts, type ToolCallFacts } from '@runplane/run-facts';

export type ToolStep =
  | { kind: 'deny'; call: ToolCallFacts; code: 'not_granted' | 'tool_call_limit'; message: string }
  | { kind: 'mark-unknown'; call: ToolCallFacts; message: string }
  | { kind: 'dispatch'; call: ToolCallFacts };

/** The steps still owed to the Run's proposed calls, in proposal order. */
export function planToolSteps(facts: RunFacts): ToolStep[] {
  if (!facts.admitted || facts.settled) return [];
  const { grant, limits } = facts.admitted;
  let dispatched = toolCallsInOrder(facts).filter((c) => c.dispatched).length;
  const steps: ToolStep[] = [];
  for (const call of toolCallsInOrder(facts)) {
    if (call.receipt) continue;
    if (call.dispatched) {
      steps.push({ kind: 'mark-unknown', call, message: 'dispatched, but its outcome was not recorded; it is not re-run' });
    } else if (!grant.tools.includes(call.name)) {
      steps.push({ kind: 'deny', call, code: 'not_granted', message: `tool ${call.name} is not in this Run's grant (${grant.tools.join(', ')})` });
    } else if (dispatched >= limits.maxToolCalls) {
      steps.push({ kind: 'deny', call, code: 'tool_call_limit', message: `the Run's tool-call limit of ${limits.maxToolCalls} is used up` });
    } else {
      dispatched++;
      steps.push({ kind: 'dispatch', call });
    }
  }
  return steps;
}
