/**
 * Settlement rules (K9): the lifecycle alone settles a Run, exactly once, from the facts other
 * owners recorded. `completed` only when publication committed an answer that lists nothing
 * unanswered and the log shows nothing the Run could not establish (`unestablishedFacts`, libs/run-facts/src/honesty.ts: a reply cut at
 * the length limit and never made whole, an answer written in finalization-only, a tool result
 * the Run never had); `partial`, with those lists as `unanswered`, when the published answer says
 * it left parts of the question unanswered or the log shows such a fact the answer's list does not
 * account for, or when the Run failed (any failure below) after committing
 * some text: published passages are never erased by a later failure, so such a Run is neither
 * `completed` nor a bare `failed` (its `unanswered` names the rest of the answer and why);
 * `completed` with the clarification pending when the Run ended asking the user a clarification
 * and its question is published (K2); `failed` with the
 * runtime's stop reason when no answer could be (an empty or length-truncated model output is not
 * an answer), or when recovery fenced it at its deadline or at the expiry of an unanswered wait
 * (`wait-expired`) or when nothing counted as progress for its no-progress limit (`no-progress`,
 * K7); `interrupted` when its execution was fenced after a fault; `canceled` on the
 * user's cancel, unless the runtime had already stopped with an answer (then the answer settles). It also records a child Run's settlement on its parent (`child.run.settled`).
 *
 * A settlement closes the Run's log to executors, at the log itself: the lifecycle settles only
 * while no executor append decided before it can land after it (`closedForSettlement`): either
 * the execution closed itself (`facts.closesItself`: the runtime subject ends in the runtime's own
 * `run.execution.finished` and every proposed tool call had its receipt then; recovery is off the happy path: no fence
 * on the happy path), or both executor subjects (`runtime`, `tools`) end in a fence of recovery
 * (`facts.closed`: a lost, canceled, late or stuck holder, or a Run that finished with a tool
 * call in flight, which recovery closes with `settling` fences). In both cases an executor append
 * decided before the settlement is refused by its conditional append on the exact subject (K6,
 * K9). And it settles only once every paragraph recorded while the answer
 * streamed is a committed passage, so text produced before a crash or a failure is kept (K9, K10).
 */
import {
  CHILD_ANSWER_MAX_BYTES,
  contextFrom,
  cutToJsonBytes,
  jsonBytes,
  makeEvent,
  sha256Hex,
  type EventData,
  type Outcome,
  type RunEvent,
  type UnansweredPart,
} from '@runplane/contracts';
import {
  closedForSettlement,
  passagesInOrder,
  toolCallsInOrder,
  uncommittedParagraphs,
  unestablishedFacts,
  usageOf,
  type RunFacts,
  unknownTrigger,
} from '@runplane/run-facts';

const FAILURE_REASONS: Record<string, string> = {
  'empty-output': 'the model returned an empty reply, which is not an answer',
  'truncated-output': 'the model output was cut off (at its length limit, or at the size limit of a recorded reply), which is not an answer',
  'incomplete-output': 'the model output did not finish normally, which is not an answer',
  'model-error': 'the model request failed',
  'model-request-limit': 'the Run used its model request budget without an answer',
  'tool-call-limit': 'the Run used all its tool calls without an answer',
  deadline: 'the Run reached its deadline without an answer',
  'token-limit': 'the Run had no answer when its token or money budget left no room for another model request',
  'no-progress': 'no answer was produced: the model made no progress',
  'context-refused': 'the context of the continuation could not be verified, so nothing was asked of the model',
  'grant-refused': "the Run's grant exceeds what this deployment allows, so nothing was asked of the model",
  'clarification-requested': 'the clarification question could not be published',
};

/**
 * What wakes the lifecycle: a fact that may complete the Run (the runtime stopping, the answer
 * published, a fence: `Wake`), or, decided on a PARENT's facts, one of its child Runs settled
 * (`ChildSettled`, K10).
 */
export type LifecycleTrigger = { type: 'Wake' } | { type: 'ChildSettled'; childRunId: string; outcome: Outcome; reason: string; answer: string };

/**
 * Decides the Run's settlement, or nothing yet (not finished, answer not yet published, executor
 * subjects not closed yet, streamed paragraphs not committed yet, already settled). Exactly one settlement per Run (K9): its id is fixed and the append expects the
 * lifecycle subject to be empty.
 * @param now the decision clock (the settlement's `occurredAt`).
 */
export function decide(facts: RunFacts, trigger: LifecycleTrigger, now: Date): RunEvent[] {
  switch (trigger.type) {
    case 'Wake':
      return settle(facts, now);
    case 'ChildSettled':
      return childSettled(facts, trigger, now);
    default:
      return unknownTrigger('lifecycle', trigger);
  }
}

function settle(facts: RunFacts, now: Date): RunEvent[] {
  if (facts.settled || !facts.admitted || !facts.lastEvent) return [];
  // the executors' subjects are closed first (the runtime's own finish with every call at rest, or
  // recovery's fences: either refuses every stale append), and the text streamed so far is committed
  if (!closedForSettlement(facts) || uncommittedParagraphs(facts).length > 0) return [];
  const passageIds = passagesInOrder(facts).map((p) => p.passageId);
  const receipts = toolCallsInOrder(facts)
    .filter((c) => c.receipt)
    .map((c) => ({ toolCallId: c.toolCallId, name: c.name, status: c.receipt!.status }));
  const settled = (outcome: Outcome, reason: string, unanswered: UnansweredPart[] = []) =>
    makeEvent(
      'run.settled',
      contextFrom(facts.lastEvent!),
      'settlement',
      { outcome, reason, passageIds, receipts, usage: usageOf(facts), unanswered },
      now,
    );
  /** A failure: `partial` when text was committed before it (kept, K9), else `failed`. */
  const failedAfter = (reason: string) =>
    passageIds.length > 0
      ? settled('partial', `${reason}; the ${passageIds.length} passage(s) committed before it are kept`, [
          { part: 'the rest of the answer', reason },
        ])
      : settled('failed', reason);
  const finished = facts.finished;
  // The user's cancel (K4) settles the Run `canceled` once its execution is fenced or stopped,
  // keeping what was published. Once the runtime has recorded that it stopped with an answer, the
  // answer wins: nothing is left to stop, and the settlement waits for its publication (below).
  // This depends only on the runtime subject's order (its `run.execution.finished` and recovery's
  // cancel fence are conditional appends there, one wins), never on which of the cancel or
  // `answer.published` a lifecycle replica happened to read first: a cancel racing the completion
  // settles the same way on every replica (K9).
  const answeredByRuntime = finished?.reason === 'answered';
  if (facts.cancelRequested && !answeredByRuntime && (facts.fenced || finished)) {
    const c = facts.cancelRequested;
    return [settled('canceled', `canceled by ${c.requestedBy ?? 'the user'}${c.reason ? `: ${c.reason}` : ''}`)];
  }
  if (!finished) {
    // The execution was fenced before it stopped on its own: it is over, not resumed in place (K10).
    // What was committed stays (passages, receipts, usage); what was in flight is named uncertain.
    const f = facts.fenced;
    if (!f) return [];
    const uncertain = f.uncertain.map((u) => (u.kind === 'model-turn' ? `model turn ${u.turn}` : `tool call ${u.name} [${u.toolCallId}]`));
    const unknown = uncertain.length ? `; outcome unknown: ${uncertain.join(', ')}` : '';
    // A Run fenced at its deadline by recovery (nobody executed it to its end in time) failed: it
    // is not interrupted by a fault, its time is up.
    if (f.reason === 'deadline') return [failedAfter(`the deadline passed while nobody executed the Run to its end: ${f.detail}${unknown}`)];
    // A Run parked on a question nobody answered in time (K10) failed: it did not crash.
    if (f.reason === 'wait-expired') return [failedAfter(`wait-expired: the question for a human was not answered in time: ${f.detail}${unknown}`)];
    // A Run that made no progress for its no-progress limit (K7) failed: it produced no answer.
    if (f.reason === 'no-progress') return [failedAfter(`no-progress: no answer was produced: ${f.detail}${unknown}`)];
    // Interrupted stays interrupted (K10: eligible for Continue), its passages kept.
    const cause = f.reason === 'runtime-stopped' ? 'the runtime stopped' : 'the runtime was lost (its lease expired)';
    return [settled('interrupted', `${cause}: ${f.detail}${unknown}`)];
  }
  if ((finished.reason === 'answered' || finished.reason === 'clarification-requested') && !facts.answer) return []; // publication has not committed it yet
  if (finished.reason === 'clarification-requested' && facts.answer!.passageIds.length > 0) {
    // the question is the published answer; the Run is done, the clarification waits for the user's reply (a new Run, K2)
    const pending = [...facts.clarifications.values()].find((c) => c.turn === finished.answerTurn);
    return [
      settled(
        'completed',
        `clarification pending: ${pending?.clarificationId ?? 'unknown'}: the question to the user was published in ${facts.answer!.passageIds.length} passage(s); a reply naming it starts a new Run`,
      ),
    ];
  }
  const answer = finished.reason === 'answered' ? facts.answer : null;
  if (answer && answer.passageIds.length > 0) {
    // passages of an earlier, not-answer turn (a reply cut at the length limit, then retried) stay
    // committed and listed in `passageIds`; the reason says so rather than miscounting the answer
    const others = passagesInOrder(facts).length - answer.passageIds.length;
    const committed = `answer committed in ${answer.passageIds.length} passage(s)${others > 0 ? `; ${others} earlier committed passage(s) kept, not part of the answer` : ''}`;
    // the answer's own list, and what the log says the Run never had (K9: whatever the text claims)
    const own = answer.unanswered ?? [];
    const unanswered = [...own, ...unestablishedFacts(facts, own)];
    if (unanswered.length === 0) return [settled('completed', committed)];
    const listed = unanswered.map((u) => `${u.part} (${u.reason})`).join('; ');
    return [settled('partial', `${committed}; not answered: ${listed}`, unanswered)];
  }
  return [failedAfter(`${FAILURE_REASONS[finished.reason] ?? finished.reason}: ${finished.detail}`)];
}

/**
 * Records a child Run's settlement on its parent (K10): `[child.run.settled]` with the child's
 * outcome, reason and published answer, once per child (fixed id). This is the parent's wake.
 * An answer over `CHILD_ANSWER_MAX_BYTES` is recorded cut, with `answerCut` (its whole size and sha256).
 * Nothing when the parent does not know the child, has its result already, or is settled.
 */
function childSettled(facts: RunFacts, t: Extract<LifecycleTrigger, { type: 'ChildSettled' }>, now: Date): RunEvent[] {
  if (facts.settled || !facts.lastEvent) return [];
  const child = facts.children.get(t.childRunId);
  if (!child || child.result) return [];
  // a child's answer grows with its model: over the limit it is recorded cut, saying so (K9, K11)
  let answer = t.answer;
  let answerCut: EventData<'child.run.settled'>['answerCut'];
  if (jsonBytes(answer) > CHILD_ANSWER_MAX_BYTES) {
    answer = cutToJsonBytes(t.answer, CHILD_ANSWER_MAX_BYTES);
    answerCut = {
      reason: 'size-limit',
      bytes: jsonBytes(t.answer),
      sha256: sha256Hex(t.answer),
      keptCharacters: answer.length,
      limitBytes: CHILD_ANSWER_MAX_BYTES,
    };
  }
  return [
    makeEvent(
      'child.run.settled',
      contextFrom(facts.lastEvent),
      `child/${t.childRunId}`,
      { childRunId: t.childRunId, toolCallId: child.toolCallId, outcome: t.outcome, reason: t.reason, answer, ...(answerCut ? { answerCut } : {}) },
      now,
    ),
  ];
}
