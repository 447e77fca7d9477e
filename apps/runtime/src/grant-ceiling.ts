/**
 * The grant ceiling (defence in depth against a forged admission, docs/guarantees.md "Who may do what"): the most any Run's grant may hold in this
 * deployment (`GrantCeilingConfig`). Admission writes its configured limits into each Run and a
 * child's are carved from its parent's, so a Run over the ceiling was not admitted by this
 * deployment's rules: a forged or corrupt `run.admitted`. The runtime never executes it.
 */
import type { RunFacts } from '@runplane/run-facts';

/** The ceiling: model requests, tool calls, seconds from admission to the deadline, input and output tokens, money (micro-units). */
export interface GrantCeiling {
  modelRequests: number;
  toolCalls: number;
  deadlineSeconds: number;
  inputTokens: number;
  outputTokens: number;
  /** The most money (`maxCost`), micro-units of any currency (`RUNPLANE_GRANT_CEILING_COST_MICROS`); unchecked when absent. */
  costMicros?: number;
}

/**
 * What in the Run's admitted limits exceeds `ceiling`, in words (one clause per limit), or null
 * when nothing does. Pure. A limit the Run does not set (no token limit: a Run admitted before
 * they existed) is not compared.
 */
export function overCeiling(facts: RunFacts, ceiling: GrantCeiling): string | null {
  const a = facts.admitted;
  if (!a) return null;
  const l = a.limits;
  const over: string[] = [];
  if (l.maxModelRequests > ceiling.modelRequests) over.push(`${l.maxModelRequests} model requests (ceiling ${ceiling.modelRequests})`);
  if (l.maxToolCalls > ceiling.toolCalls) over.push(`${l.maxToolCalls} tool calls (ceiling ${ceiling.toolCalls})`);
  const seconds = (Date.parse(l.deadlineAt) - Date.parse(a.at)) / 1000;
  if (!(seconds <= ceiling.deadlineSeconds)) over.push(`a deadline ${Math.round(seconds)} s after admission (ceiling ${ceiling.deadlineSeconds} s)`);
  if (l.maxInputTokens !== undefined && l.maxInputTokens > ceiling.inputTokens)
    over.push(`${l.maxInputTokens} input tokens (ceiling ${ceiling.inputTokens})`);
  if (l.maxOutputTokens !== undefined && l.maxOutputTokens > ceiling.outputTokens)
    over.push(`${l.maxOutputTokens} output tokens (ceiling ${ceiling.outputTokens})`);
  if (l.maxCost !== undefined && ceiling.costMicros !== undefined && l.maxCost.micros > ceiling.costMicros)
    over.push(`a money limit of ${l.maxCost.micros} micro-${l.maxCost.currency} (ceiling ${ceiling.costMicros})`);
  return over.length ? `the grant exceeds this deployment's ceiling: ${over.join(', ')}` : null;
}
