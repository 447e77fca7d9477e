/**
 * What a Run could not establish, read from its log alone (K9), whatever the model's text claims:
 * every tool call whose receipt is `failed`, `denied` or `unknown` and whose result no other call of
 * the same tool with the same arguments, before or after it, obtained (`succeeded`). An answer rests on what its tools
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
import { toolCallsInOrder, type RunFacts, type ToolCallFacts } from './index.js';

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
