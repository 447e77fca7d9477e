/**
 * What a Run could not establish, read from its log alone (K9), whatever the model's text claims
 * ({@link unestablishedFacts} gathers the three kinds, in this order):
 * - a reply cut at the length limit and never made whole ({@link uncoveredCutTurns});
 * - an answer written in finalization-only ({@link finalizationEnding});
 * - every tool call whose receipt is `failed`, `denied` or `unknown` and whose result no other call of
 * the same tool with the same arguments, before or after it, obtained (`succeeded`);
 * - every call a completed research turn asked for that never became a tool call, a wait, a child
 * Run or a clarification: the runtime refused it before anything ran (arguments over the size
 * limit, a question it could not read, a tool outside the grant), and no identical call succeeded
 * ({@link unexecutedCalls}). An answer rests on what its tools
 * returned; a result the Run never had is a part of the question it may not have answered, so the
 * settlement lists it beside the answer's own unanswered list, and such a Run is `partial`, never
 * `completed`. The answer accounts for such a call when an entry of its own list names one of the
 * call's argument values (the fund `VGT` of `get_holdings({"fund":"VGT"})` in "holdings of VGT")
 * or the call's id: then it is not listed twice. A late observation or an operator's reconciliation of an `unknown` call does not
 * resolve it: the answer was made without the result. Pure.
 *
 * One owner, two readers: the lifecycle settles with it (apps/lifecycle decide.ts) and the audit
 * checks a settlement against it from the events alone (libs/audit `results-established`).
 */
import type { UnansweredPart } from '@runplane/contracts';
import type { RunFacts, ToolCallFacts, TurnFacts } from './fold.js';
import { toolCallsInOrder } from './queries.js';

/**
 * Everything `facts` says the Run could not establish and that `listed` (the published answer's
 * own list) does not account for, one `{part, reason}` each (K9): cut replies never made whole,
 * then a finalization-only ending, then results the Run never had. Empty when the log shows none.
 * Pure.
 */
export function unestablishedFacts(facts: RunFacts, listed: readonly UnansweredPart[] = []): UnansweredPart[] {
  return [
    ...uncoveredCutTurns(facts, listed),
    ...finalizationEnding(facts, listed),
    ...unestablishedResults(facts, listed),
    ...unexecutedCalls(facts, listed),
  ];
}

/**
 * The calls the model asked for in a completed research turn (`model.turn.completed`, not cut at
 * the length limit: {@link uncoveredCutTurns} covers those) that the log shows were never run: no
 * `tool.call.proposed`, `wait.opened`, `child.run.requested` or `clarification.requested` carries
 * their id. The runtime refused them itself and told the model so (a call whose arguments or name
 * were over the size limit, recorded cut; a sub-agent or a question without a readable question;
 * a second park in one turn; a parking tool outside the grant), so no receipt records them (K9: a
 * real model that answered as if it had run one settled `completed`). One entry per tool and
 * arguments, in turn order, leaving out a call an identical call answered (`succeeded`) and those
 * the answer's own list names, as {@link unestablishedResults} does. `part`: `the result of
 * <tool>(<arguments>) [<id>]`; `reason`: that it was never executed, and why when the log says it.
 */
export function unexecutedCalls(facts: RunFacts, listed: readonly UnansweredPart[] = []): UnansweredPart[] {
  const taken = new Set<string>([
    ...facts.toolCalls.keys(),
    ...[...facts.waits.values()].map((w) => w.toolCallId),
    ...[...facts.children.values()].map((c) => c.toolCallId),
    ...[...facts.clarifications.values()].map((c) => c.toolCallId),
  ]);
  const calls = toolCallsInOrder(facts);
  const named = listed.map((u) => `${u.part}\n${u.reason}`.toLowerCase());
  const seen = new Set<string>();
  const out: UnansweredPart[] = [];
  for (const t of facts.turns) {
    const done = t.completed;
    if (!done || done.finishReason === 'length' || t.request.purpose === 'finalization') continue;
    for (const call of done.toolCalls) {
      if (taken.has(call.toolCallId)) continue;
      const key = `${call.name}\n${call.argumentsText}`;
      if (seen.has(key)) continue;
      seen.add(key);
      if (calls.some((other) => other.receipt?.status === 'succeeded' && other.name === call.name && other.argumentsText === call.argumentsText))
        continue;
      const names = [call.toolCallId, ...argumentValues(call.argumentsText)].map((v) => v.toLowerCase());
      if (named.some((text) => names.some((n) => text.includes(n)))) continue;
      const cut = done.cut?.find((c) => c.toolCallId === call.toolCallId && c.field !== 'content');
      const why = cut
        ? `its ${cut.field === 'name' ? 'name' : 'arguments'} (${cut.bytes} bytes) were over the size limit of ${cut.limitBytes} bytes`
        : 'the runtime refused it as asked (its reply to the model says why)';
      out.push({
        part: `the result of ${call.name}(${clip(call.argumentsText, ARGUMENTS_QUOTED_MAX)}) [${call.toolCallId}]`,
        reason: `the call was never executed: ${why}; recorded in the log, whatever the answer says`,
      });
    }
  }
  return out;
}

/**
 * The model turns whose reply was cut at the length limit (`model.turn.completed` with
 * `finishReason: 'length'`) and that no later research turn covers, in turn order (K9). The
 * runtime never proposes a cut turn's tool calls and never takes its text as the answer; it asks
 * again (a retry, `retryOf`). A later research turn (not the finalization request) that completed
 * whole (any finish reason but `length`) covers it: the model took that step again and its reply
 * arrived in full. A finalization turn does not cover it: it answers from what research had
 * gathered, and the step the cut reply was taking was never taken. A cut finalization turn is no
 * answer, so it never reaches this rule. The answer's own list accounts for a cut turn when one of
 * its entries names it as this rule does (`model turn <n>`), so it is not listed twice.
 * `part`: `the reply of model turn <n>`; `reason`: that it was cut and never made whole, and how
 * many of its characters were kept.
 */
export function uncoveredCutTurns(facts: RunFacts, listed: readonly UnansweredPart[] = []): UnansweredPart[] {
  const named = listed.map((u) => `${u.part}\n${u.reason}`.toLowerCase());
  const out: UnansweredPart[] = [];
  facts.turns.forEach((t, i) => {
    if (t.completed?.finishReason !== 'length') return;
    if (facts.turns.slice(i + 1).some(coversCut)) return;
    const name = `model turn ${t.turn}`;
    if (named.some((text) => new RegExp(`\\b${name}\\b`).test(text))) return;
    const kept = t.completed.content.length;
    out.push({
      part: `the reply of ${name}`,
      reason: `it was cut at the length limit (${kept} character(s) of text kept${t.completed.toolCalls.length ? `, ${t.completed.toolCalls.length} tool call(s) never proposed` : ''}) and no later research turn was whole; recorded in the log, whatever the answer says`,
    });
  });
  return out;
}

/** True for a research turn (not the finalization request) that completed with a whole reply. */
function coversCut(t: TurnFacts): boolean {
  return t.request.purpose !== 'finalization' && !!t.completed && t.completed.finishReason !== 'length';
}

/**
 * When the Run's answer was written in finalization-only (`run.finalization.started` recorded and
 * the execution finished `answered`: the one last request without tools, after a research budget
 * was spent or the deadline came close, K7), the unfinished scope the runtime recorded on entering
 * it (its `unfinished` list) (K9). Publication copies that list onto the answer; the lifecycle
 * reads it from the runtime's own event, so a Run answered that way is never `completed`, whatever
 * the answer lists. An entry is accounted for when the answer's list has an entry with the same
 * `part` (case and surrounding blanks aside). Empty for any other ending.
 */
export function finalizationEnding(facts: RunFacts, listed: readonly UnansweredPart[] = []): UnansweredPart[] {
  const fin = facts.finalization;
  if (!fin || facts.finished?.reason !== 'answered') return [];
  const parts = new Set(listed.map((u) => u.part.trim().toLowerCase()));
  return fin.unfinished
    .filter((u) => !parts.has(u.part.trim().toLowerCase()))
    .map((u) => ({
      part: u.part,
      reason: `${u.reason}; the Run answered in finalization-only (${fin.reason}: ${fin.detail}), recorded in the log, whatever the answer says`,
    }));
}

/** Receipt statuses whose result the Run never had. */
const UNESTABLISHED = new Set(['failed', 'denied', 'unknown']);
/** Characters of a call's arguments quoted in the part (the rest elided with `...`). */
const ARGUMENTS_QUOTED_MAX = 200;
/** Characters of the tool's error message quoted in the reason. */
const ERROR_QUOTED_MAX = 300;

const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max)}...` : text);

/**
 * The tool calls of `facts` whose result the Run could not establish, in proposal order, one
 * `{part, reason}` each (K9), leaving out those `listed` (the answer's own list) accounts for. `part`: `the result of <tool>(<arguments>) [<toolCallId>]`;
 * `reason`: the receipt's status and error. Empty when every call succeeded or was answered by a
 * identical call.
 */
export function unestablishedResults(facts: RunFacts, listed: readonly UnansweredPart[] = []): UnansweredPart[] {
  const calls = toolCallsInOrder(facts);
  const named = listed.map((u) => `${u.part}\n${u.reason}`.toLowerCase());
  const out: UnansweredPart[] = [];
  const seen = new Set<string>();
  for (const call of calls) {
    const status = call.receipt?.status;
    if (!status || !UNESTABLISHED.has(status)) continue;
    // one entry per tool and arguments: a call repeated and failing again is the same missing result
    const key = `${call.name}\n${call.argumentsText}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (calls.some((other) => answers(other, call))) continue; // the Run had that result from an identical call, before or after
    const names = [call.toolCallId, ...argumentValues(call.argumentsText)].map((v) => v.toLowerCase());
    if (named.some((text) => names.some((n) => text.includes(n)))) continue; // the answer's own list accounts for it
    const error = call.receipt!.error;
    const why =
      status === 'unknown'
        ? 'its outcome is unknown (the call may or may not have taken effect; it was not repeated)'
        : status === 'denied'
          ? 'the call was denied'
          : 'the call failed';
    out.push({
      part: `the result of ${call.name}(${clip(call.argumentsText, ARGUMENTS_QUOTED_MAX)}) [${call.toolCallId}]`,
      reason: `${why}${error ? `: ${error.code}: ${clip(error.message, ERROR_QUOTED_MAX)}` : ''}; recorded in the log, whatever the answer says`,
    });
  }
  return out;
}

/** True when `other` is the same tool with the same arguments as `call`, and succeeded. */
function answers(other: ToolCallFacts, call: ToolCallFacts): boolean {
  return other.receipt?.status === 'succeeded' && other.name === call.name && other.argumentsText === call.argumentsText;
}

/** The text values (at least 2 characters) anywhere in a call's JSON arguments; none when they are not JSON. */
function argumentValues(argumentsText: string): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(argumentsText);
  } catch {
    return [];
  }
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (typeof v === 'string') {
      if (v.trim().length >= 2) out.push(v.trim());
    } else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk(parsed);
  return out;
}
