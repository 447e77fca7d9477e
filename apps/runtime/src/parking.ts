/**
 * Parking rules (K2, K7, K10): what the runtime makes of a model's `ask_human`, `spawn_subagent`
 * and `ask_clarification` calls. A clarification does not park: it ends the Run with the question
 * as its answer (`clarification.requested`, then `run.execution.finished`
 * `clarification-requested`); the reply is a new Run. They are never proposed to the tools service; instead the Run parks on a durable wait
 * (`wait.opened`) or a child Run (`child.run.requested`) and holds no lease until its wake is
 * recorded (`wait.answered`, `child.run.settled`). Everything here is a pure function of the
 * Run's facts and the turn's recorded completion time, so a runtime that decides a turn again
 * after a crash reaches the same classification and the same events.
 */
import {
  admissionIds,
  childClientMessageId,
  clarificationIdOf,
  isParkingTool,
  makeEvent,
  ParkingToolArgs,
  ParkingToolNames,
  waitIdOf,
  type EventContext,
  type ProposedToolCall,
  type RunEvent,
  type RunGrant,
  type RunLimits,
} from '@runplane/contracts';
import { budgetOf, parkedAtLastTurn, parkedOn, type RunFacts } from '@runplane/run-facts';

/** How one tool call of a completed turn is handled. */
export type CallPlan =
  /** An ordinary tool: proposed to the tools service, resolved by its receipt. */
  | { kind: 'tool' }
  /** `ask_human`: the Run parks on a wait, resolved by its answer. */
  | { kind: 'wait'; question: string }
  /** `spawn_subagent`: the Run parks on a child Run with the carved grant and limits, resolved by its settlement. */
  | { kind: 'child'; question: string; grant: RunGrant; limits: RunLimits }
  /** `ask_clarification`: the Run ends with the question published as its answer (K2). */
  | { kind: 'clarification'; question: string }
  /** A parking call that cannot park: resolved at once; the model reads the error as the call's result. */
  | { kind: 'rejected'; status: 'failed' | 'denied'; error: { code: string; message: string } };

/** Smallest share of the parent's remaining time a child gets, ms: below it no child is spawned. */
const MIN_CHILD_MS = 1_000;

/**
 * Plans every call of turn `turnNo` (which must be completed, at `completedAt`). Rules:
 * - a call whose name is not a parking tool is an ordinary `tool`;
 * - a parking tool outside the grant is `denied` (`not_granted`); arguments that are not
 *   `{question}` with a non-blank question are `failed` (`bad_arguments`);
 * - only the first parking call of a turn that can park parks (the Run waits on one thing at a
 *   time); every later one is `denied` (`one_park_per_turn`);
 * - a child gets at most half of what the parent has left after this turn (K7): model requests
 *   `floor((max - reserve - turnNo - carved before) / 2)` (at least 1, else `denied`
 *   `no_budget_for_child`: the parent keeps at least one request to use the result), tool calls
 *   `floor((max - ordinary calls proposed so far - carved before) / 2)`, deadline halfway from
 *   the turn to the parent's deadline; input and output tokens half of what research has left
 *   (the parent's reserve excluded; usage of the turns before this one); a child with 2 or more
 *   model requests keeps a reserve of 1 request (and at most half its output tokens) out of its
 *   own share; its grant is the parent's without the parking tools (a
 *   child neither asks the human nor spawns children of its own);
 * - a granted `ask_clarification` with a valid question (the first of its turn) ends the Run
 *   (K2): every other call of that turn is `denied` (`clarification_ends_run`), nothing of it is
 *   executed or parked on while the user is asked what they meant.
 */
export function planCalls(facts: RunFacts, turnNo: number, calls: readonly ProposedToolCall[], completedAt: Date): Map<string, CallPlan> {
  const { grant, limits } = facts.admitted!;
  const plans = new Map<string, CallPlan>();
  const clarifying = calls.find((c) => c.name === 'ask_clarification' && grant.tools.includes(c.name) && questionOf(c.argumentsText) !== null);
  if (clarifying) {
    for (const call of calls) {
      plans.set(
        call.toolCallId,
        call === clarifying
          ? { kind: 'clarification', question: questionOf(call.argumentsText)! }
          : rejected('denied', 'clarification_ends_run', 'the Run ends with a clarification question in this turn; nothing else is done'),
      );
    }
    return plans;
  }
  let parked = false;
  for (const call of calls) {
    if (!isParkingTool(call.name)) {
      plans.set(call.toolCallId, { kind: 'tool' });
      continue;
    }
    if (!grant.tools.includes(call.name)) {
      plans.set(call.toolCallId, rejected('denied', 'not_granted', `tool ${call.name} is not in this Run's grant`));
      continue;
    }
    const question = questionOf(call.argumentsText);
    if (question === null) {
      plans.set(call.toolCallId, rejected('failed', 'bad_arguments', 'the arguments must be {"question": "<non-blank text>"}; nothing was asked'));
      continue;
    }
    if (parked) {
      plans.set(
        call.toolCallId,
        rejected('denied', 'one_park_per_turn', 'the Run waits on one question or sub-agent at a time; ask again after it is answered'),
      );
      continue;
    }
    if (call.name === 'ask_human') {
      plans.set(call.toolCallId, { kind: 'wait', question });
      parked = true;
      continue;
    }
    const carve = carveChild(facts, turnNo, calls, grant, limits, completedAt);
    if ('error' in carve) {
      plans.set(call.toolCallId, rejected('denied', 'no_budget_for_child', carve.error));
      continue;
    }
    plans.set(call.toolCallId, { kind: 'child', question, ...carve });
    parked = true;
  }
  return plans;
}

/** The question of a parking call, or null when its arguments are not `{question}` with a non-blank text. */
function questionOf(argumentsText: string): string | null {
  let raw: unknown;
  try {
    raw = JSON.parse(argumentsText);
  } catch {
    return null;
  }
  const parsed = ParkingToolArgs.safeParse(raw);
  return parsed.success ? parsed.data.question : null;
}

function rejected(status: 'failed' | 'denied', code: string, message: string): CallPlan {
  return { kind: 'rejected', status, error: { code, message } };
}

/** The child's grant and limits carved from what the parent has left after `turnNo` (see {@link planCalls}). */
function carveChild(
  facts: RunFacts,
  turnNo: number,
  calls: readonly ProposedToolCall[],
  grant: RunGrant,
  limits: RunLimits,
  completedAt: Date,
): { grant: RunGrant; limits: RunLimits } | { error: string } {
  // the ledger before this turn (K7): the turns and children before it (the same whether or not this turn is folded yet)
  const childrenBefore = new Map([...facts.children].filter(([, c]) => c.turn < turnNo));
  const before = budgetOf({ ...facts, turns: facts.turns.filter((t) => t.turn < turnNo), children: childrenBefore });
  // ordinary calls proposed up to and including this turn (this turn's may not be folded yet)
  let ordinaryCalls = calls.filter((c) => !isParkingTool(c.name)).length;
  for (const t of facts.turns) {
    if (t.turn < turnNo) ordinaryCalls += (t.completed?.toolCalls ?? []).filter((c) => !isParkingTool(c.name)).length;
  }
  // the parent's final-output reserve is never carved (K7, K9): the child gets a share of research's allowance only
  const parentReserve = limits.finalOutputReserve;
  // research's model requests left before this turn, less this turn's own request
  const leftModel = limits.maxModelRequests - (parentReserve?.modelRequests ?? 0) - before.modelRequests.used - before.modelRequests.carved - 1;
  const childModel = Math.floor(leftModel / 2);
  if (childModel < 1) return { error: `${Math.max(0, leftModel)} model request(s) left: too few to carve a child's grant and still use its result` };
  const childTools = Math.floor(Math.max(0, limits.maxToolCalls - ordinaryCalls - before.toolCalls.carved) / 2);
  const leftMs = Date.parse(limits.deadlineAt) - completedAt.getTime();
  const childMs = Math.floor(leftMs / 2);
  if (childMs < MIN_CHILD_MS) return { error: `${Math.max(0, leftMs)} ms left before the deadline: too little for a child` };
  const childLimits: RunLimits = {
    maxModelRequests: childModel,
    maxToolCalls: childTools,
    deadlineAt: new Date(completedAt.getTime() + childMs).toISOString(),
  };
  // tokens: half of what research has left before this turn
  if (before.inputTokens.researchLeft !== null) childLimits.maxInputTokens = Math.max(1, Math.floor(before.inputTokens.researchLeft / 2));
  if (before.outputTokens.researchLeft !== null) childLimits.maxOutputTokens = Math.max(1, Math.floor(before.outputTokens.researchLeft / 2));
  // money (K7): half of what is left after this turn's own reservation (charged as if still in flight, so
  // the carve is the same whether or not the turn's outcome is folded yet, and never more than is left)
  if (limits.maxCost) {
    const money = budgetOf({
      ...facts,
      turns: facts.turns.filter((t) => t.turn <= turnNo).map((t) => (t.turn === turnNo ? { ...t, completed: null, failed: null } : t)),
      children: childrenBefore,
    }).cost;
    childLimits.maxCost = { micros: Math.floor((money.left ?? 0) / 2), currency: limits.maxCost.currency };
  }
  // the child keeps a reserve of its own, out of its share (never added to it), when its share can hold one besides research
  if (parentReserve && parentReserve.modelRequests > 0 && childModel >= 2) {
    const outputTokens = Math.min(parentReserve.outputTokens, Math.floor((childLimits.maxOutputTokens ?? 0) / 2));
    childLimits.finalOutputReserve = { modelRequests: 1, outputTokens };
  }
  return {
    grant: { model: grant.model, tools: grant.tools.filter((t) => !(ParkingToolNames as string[]).includes(t)) },
    limits: childLimits,
  };
}

/**
 * The events that park or end the Run for one planned call: `wait.opened` (expiring at
 * `min(completedAt + waitTtlMs, deadlineAt)`), `child.run.requested` or `clarification.requested`
 * (ids derived from the Run and the tool call, so a repeated decision is the same event).
 */
export function parkingEvent(
  facts: RunFacts,
  ctx: EventContext,
  call: ProposedToolCall,
  turn: number,
  plan: CallPlan,
  completedAt: Date,
  waitTtlMs: number,
  now: Date,
): RunEvent | null {
  if (plan.kind === 'wait') {
    const waitId = waitIdOf(facts.runId, call.toolCallId);
    const expiresAt = new Date(Math.min(completedAt.getTime() + waitTtlMs, Date.parse(facts.admitted!.limits.deadlineAt))).toISOString();
    return makeEvent('wait.opened', ctx, waitId, { waitId, toolCallId: call.toolCallId, turn, question: plan.question, expiresAt }, now);
  }
  if (plan.kind === 'clarification') {
    const clarificationId = clarificationIdOf(facts.runId, call.toolCallId);
    return makeEvent(
      'clarification.requested',
      ctx,
      clarificationId,
      { clarificationId, toolCallId: call.toolCallId, turn, question: plan.question },
      now,
    );
  }
  if (plan.kind === 'child') {
    const clientMessageId = childClientMessageId(facts.runId, call.toolCallId);
    const childRunId = admissionIds(facts.conversationId, clientMessageId).runId;
    return makeEvent(
      'child.run.requested',
      ctx,
      childRunId,
      { childRunId, clientMessageId, toolCallId: call.toolCallId, turn, question: plan.question, grant: plan.grant, limits: plan.limits },
      now,
    );
  }
  return null;
}

/** The clarification a completed turn asks (K2), when one of its calls plans as one. */
export function clarificationOf(plans: ReadonlyMap<string, CallPlan>): { toolCallId: string; question: string } | null {
  for (const [toolCallId, plan] of plans) if (plan.kind === 'clarification') return { toolCallId, question: plan.question };
  return null;
}

/** True when the call's outcome is known: a receipt, an answer, a child's settlement, a recorded clarification, or a rejection. */
export function isResolved(facts: RunFacts, call: ProposedToolCall, plan: CallPlan): boolean {
  switch (plan.kind) {
    case 'tool':
      return !!facts.toolCalls.get(call.toolCallId)?.receipt;
    case 'wait':
      return !!facts.waits.get(waitIdOf(facts.runId, call.toolCallId))?.answer;
    case 'child':
      return [...facts.children.values()].some((c) => c.toolCallId === call.toolCallId && c.result);
    case 'clarification':
      return facts.clarifications.has(clarificationIdOf(facts.runId, call.toolCallId));
    case 'rejected':
      return true;
  }
}

/**
 * True when a wake cannot take the Run's lease yet but will once recovery acts (K10): the log shows
 * the Run parked at its last turn with its wake recorded, and the lease is still `held` (by a holder
 * that parked it and is lost, or about to release it) or released `stopping` (recovery turns both
 * into `parked` when the log says parked). Not for a lease held at a later epoch by a holder that
 * already continues: it has requested the next turn, so the log no longer shows the park.
 */
export function wakeAwaitsRecovery(facts: RunFacts, lease: { state: string; reason?: string }): boolean {
  if (parkedOn(facts) || !parkedAtLastTurn(facts) || facts.cancelRequested) return false;
  return lease.state === 'held' || (lease.state === 'released' && lease.reason === 'stopping');
}
