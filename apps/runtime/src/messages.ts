/**
 * Builds the model's view of a Run from its facts: the question, each completed turn, and each
 * tool call's receipt as the model reads it (`ToolMessageContent`: unknown stays unknown, K5).
 */
import { z } from 'zod';
import {
  clarificationIdOf,
  ParkingToolPack,
  sha256Hex,
  ToolPack,
  UNANSWERED_FENCE,
  waitIdOf,
  type ProposedToolCall,
  type ResultRef,
  type SizeCut,
  type ToolMessageContent,
  type ToolName,
} from '@runplane/contracts';
import type { ToolCallFacts, RunFacts } from '@runplane/run-facts';
import type OpenAI from 'openai';
import { contextMessages, project, sizeOf, type Segment } from './context.js';
import type { CallPlan } from './parking.js';
import { planTurnCalls } from './sizes.js';

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type Tool = OpenAI.Chat.Completions.ChatCompletionTool;

/**
 * The system prompt of every model request. It asks the model for the same structure the offline
 * research policy writes: the parts it could not answer, in words and as the closing
 * `runplane-unanswered` block (`splitUnanswered`), which publication records and the lifecycle
 * settles `partial` on (K9).
 */
export const SYSTEM_PROMPT = [
  "You are Runplane's fund research agent. Answer the user's question from the holdings files the tools read; never invent data.",
  'Call tools to look things up. State every date as YYYY-MM-DD, as read from inside the file, and name the file each figure comes from.',
  'If a tool fails, is denied or its outcome is unknown, say so plainly; do not treat an unknown outcome as a success.',
  'Write the final answer as short passages separated by blank lines.',
  'Never answer an easier question than the one asked. Say in words which parts of the question you could not answer and why',
  '(a fund with no data, a date you could not use, a sub-question you skipped), then end the final answer with this block,',
  `listing them (an empty list when you answered everything): ${UNANSWERED_FENCE}`,
  '{"unanswered":[{"part":"<the part of the question>","reason":"<why it is not answered>"}]} ``` on its own lines, with no blank line inside it.',
].join(' ');

/**
 * Function-tool definitions for the tools in the Run's grant (JSON Schema from the zod contract),
 * the parking tools (`ask_human`, `spawn_subagent`) included only when granted.
 */
export function toolDefinitions(granted: readonly string[]): Tool[] {
  return granted.filter((n): n is ToolName => n in TOOL_PACK).map(toolDefinition);
}

const TOOL_PACK: Record<string, { args: z.ZodType; description: string }> = { ...ToolPack, ...ParkingToolPack };

/**
 * One tool's definition, made once per process: `z.toJSONSchema` on every model request was
 * about 2 % of the runtime's CPU. Each call returns a fresh copy (the caller owns what it sends).
 */
const toolDefinition = (() => {
  const made = new Map<string, Tool>();
  return (name: string): Tool => {
    let tool = made.get(name);
    if (!tool) {
      const { $schema: _drop, ...parameters } = z.toJSONSchema(TOOL_PACK[name]!.args, { io: 'input' }) as Record<string, unknown>;
      tool = { type: 'function', function: { name, description: TOOL_PACK[name]!.description, parameters } };
      made.set(name, tool);
    }
    return structuredClone(tool);
  };
})();

/**
 * What the model reads for a parking call (K10): the human's answer, the child Run's result, or
 * why nothing was asked; `unknown` only while unresolved (never sent: the Run is parked then).
 */
export function parkingMessageContent(facts: RunFacts, call: ProposedToolCall, plan: CallPlan): ToolMessageContent {
  if (plan.kind === 'rejected') return { status: plan.status, error: plan.error };
  if (plan.kind === 'clarification') {
    return { status: 'succeeded', result: { clarificationId: clarificationIdOf(facts.runId, call.toolCallId), asked: plan.question } };
  }
  if (plan.kind === 'wait') {
    const w = facts.waits.get(waitIdOf(facts.runId, call.toolCallId));
    if (w?.answer) return { status: 'succeeded', result: { answer: w.answer.answer, answeredBy: w.answer.answeredBy, answeredAt: w.answer.at } };
    return { status: 'unknown', error: { code: 'not_answered', message: 'the question has no answer recorded' } };
  }
  const child = [...facts.children.values()].find((c) => c.toolCallId === call.toolCallId);
  const r = child?.result;
  if (!child || !r) return { status: 'unknown', error: { code: 'child_not_settled', message: 'the sub-agent has not settled' } };
  const cut = r.answerCut
    ? {
        answerCut: `the answer is ${r.answerCut.bytes} bytes, over the limit of ${r.answerCut.limitBytes}: only its first ${r.answerCut.keptCharacters} characters are recorded here (sha256 of the whole ${r.answerCut.sha256})`,
      }
    : {};
  if (r.outcome === 'completed')
    return { status: 'succeeded', result: { childRunId: child.childRunId, outcome: r.outcome, answer: r.answer, ...cut } };
  return {
    status: 'failed',
    error: {
      code: `child_${r.outcome}`,
      message: `the sub-agent Run ${child.childRunId} settled ${r.outcome}: ${r.reason}${r.answer ? `; what it published: ${r.answer}` : ''}`,
    },
  };
}

/** What the model reads for one receipt; `result` is the inline or fetched-by-reference result. */
export function toolMessageContent(call: ToolCallFacts, result: unknown): ToolMessageContent {
  const r = call.receipt;
  if (!r) return { status: 'unknown', error: { code: 'no_receipt', message: 'no receipt recorded' } };
  if (r.status === 'succeeded') return { status: 'succeeded', result };
  const error = r.error ?? { code: r.status, message: `tool call ${r.status}` };
  if (r.status !== 'unknown') return { status: r.status, error };
  // An unknown call stays unknown; what an operator or a late result said is shown beside it (K5).
  const rec = call.reconciliation;
  const late = call.lateObserved;
  return {
    status: 'unknown',
    error,
    ...(rec ? { reconciliation: { outcome: rec.outcome, evidence: rec.evidence, by: rec.operator, at: rec.at } } : {}),
    ...(late ? { lateObservation: { status: late.status, at: late.at } } : {}),
  };
}

/**
 * The chat messages for the next model request: the system prompt, the labelled material carried
 * from earlier Runs (`./context.ts`: history, a continuation's parent, a clarification's question;
 * K2, K3), the Run's own text as the last user message, then each completed turn with the results
 * of its calls. Over `maxChars` (characters of the messages' JSON), whole carried items and then
 * whole earlier turns are left out, oldest first; the latest turn, the request and the goal are
 * always sent, and a tool call never travels without its result. Still over it, the latest turn's
 * tool messages are narrowed to excerpts with a note of what was left out and where the whole is
 * (its receipt, digest and stored reference; `narrowLatest`).
 * @param results succeeded results by toolCallId (inline, or fetched from the result store).
 * @param maxChars the context budget (`RUNPLANE_CONTEXT_MAX_CHARS`); unbounded by default.
 */
export function buildMessages(facts: RunFacts, results: ReadonlyMap<string, unknown>, maxChars = Number.POSITIVE_INFINITY): Message[] {
  if (!facts.admitted) throw new Error(`run ${facts.runId} is not admitted`);
  const carried = contextMessages(facts);
  const segments: Segment[] = [
    { messages: [{ role: 'system', content: SYSTEM_PROMPT }, ...carried.head], droppable: false },
    ...carried.droppable.map((m) => ({ messages: [m], droppable: true })),
    { messages: [...carried.tail, { role: 'user', content: facts.admitted.message.content }], droppable: false },
  ];
  const turns: Message[][] = [];
  const latest = [...facts.turns].reverse().find((t) => t.completed);
  const sources = new Map<Message, Source>();
  for (const turn of facts.turns) {
    const done = turn.completed;
    if (!done) continue;
    const record = { where: `the record of turn ${turn.turn} (model.turn.completed) on this Run's log`, sha256: sha256Hex(done.content) };
    if (done.toolCalls.length === 0) {
      const message: Message = { role: 'assistant', content: done.content };
      turns.push([message]);
      if (turn === latest) sources.set(message, record);
      continue;
    }
    const group: Message[] = [
      {
        role: 'assistant',
        content: done.content === '' ? null : done.content,
        tool_calls: done.toolCalls.map((c) => ({
          id: c.toolCallId,
          type: 'function',
          function: { name: c.name, arguments: sentArguments(c, done.cut) },
        })),
      },
    ];
    if (turn === latest) sources.set(group[0]!, record);
    const plans = planTurnCalls(facts, turn.turn, done.toolCalls, done.cut, new Date(turn.completedAt ?? 0));
    for (const c of done.toolCalls) {
      const plan = plans.get(c.toolCallId)!;
      if (plan.kind !== 'tool') {
        const message = { role: 'tool', tool_call_id: c.toolCallId, content: JSON.stringify(parkingMessageContent(facts, c, plan)) } as const;
        group.push(message);
        if (turn === latest) sources.set(message, { where: `this Run's log (the ${plan.kind} of tool call ${c.toolCallId})` });
        continue;
      }
      const call = facts.toolCalls.get(c.toolCallId);
      const result = results.get(c.toolCallId);
      const content = call
        ? toolMessageContent(call, result)
        : toolMessageContent({ ...c, turn: turn.turn, proposedSeq: 0, dispatched: false, receipt: null }, undefined);
      const message = { role: 'tool', tool_call_id: c.toolCallId, content: JSON.stringify(content) } as const;
      group.push(message);
      if (turn === latest) sources.set(message, sourceOf(c.toolCallId, call, result));
    }
    turns.push(group);
  }
  // every earlier turn may be left out whole; the latest is what the model is answering now
  turns.forEach((messages, i) => segments.push({ messages, droppable: i < turns.length - 1 }));
  return narrowLatest(project(segments, maxChars), sources, maxChars);
}

/** Characters of a cut call's recorded arguments shown back to the model. */
const CUT_ARGUMENTS_SHOWN = 200;

/**
 * A call's arguments as sent back to the model: as recorded, except for a call whose arguments
 * were cut for their size (never executed), whose record is replaced by a short JSON note and
 * excerpt (the whole cut record would only crowd the context; the tool message says why).
 */
function sentArguments(call: ProposedToolCall, cuts: readonly SizeCut[] | undefined): string {
  const entry = cuts?.find((c) => c.toolCallId === call.toolCallId && c.field === 'arguments');
  if (!entry) return call.argumentsText;
  return JSON.stringify({
    cut: `arguments of ${entry.bytes} bytes, over the limit of ${entry.limitBytes}: not recorded whole, not executed`,
    excerpt: call.argumentsText.slice(0, CUT_ARGUMENTS_SHOWN),
  });
}

/** Where the whole of a narrowed tool message can be read: the receipt on the Run's log, its digest, and its stored reference. */
interface Source {
  where: string;
  sha256?: string;
  resultRef?: ResultRef;
}

function sourceOf(toolCallId: string, call: ToolCallFacts | undefined, result: unknown): Source {
  const r = call?.receipt;
  const where = `the receipt of tool call ${toolCallId} on this Run's log`;
  if (r?.resultRef) return { where, sha256: r.resultRef.sha256, resultRef: r.resultRef };
  if (r?.status === 'succeeded' && result !== undefined) return { where, sha256: sha256Hex(JSON.stringify(result)) };
  return { where };
}

/**
 * Narrows the latest turn's tool messages when the request is still over `maxChars` once every
 * earlier unit was left out (K7: the budget bounds every request, the latest turn included): the
 * room left is shared fairly between them and the turn's own reply text (a small one stays whole),
 * and each one over its share is replaced by its first characters (`excerpt`) and a note of how
 * much was left out and how to get the rest (the receipt or the turn on the Run's log, the sha256
 * of the whole, a result's `resultRef`). Every message stays (one tool message per call of the
 * assistant message: the pairing holds), and none is made larger than it was.
 */
function narrowLatest(messages: Message[], sources: ReadonlyMap<Message, Source>, maxChars: number): Message[] {
  if (!Number.isFinite(maxChars) || sources.size === 0) return messages;
  const total = sizeOf(messages);
  if (total <= maxChars) return messages;
  const narrowable = messages.filter((m) => sources.has(m));
  const fixed = total - sizeOf(narrowable);
  // water-filling: each message gets an equal share of the room, a smaller one gives its rest to the others
  const shares = new Map<Message, number>();
  let room = Math.max(0, maxChars - fixed);
  const bySize = [...narrowable].sort((a, b) => sizeOf([a]) - sizeOf([b]));
  bySize.forEach((m, i) => {
    const share = Math.floor(room / (bySize.length - i));
    const size = sizeOf([m]);
    shares.set(m, Math.min(size, share));
    room -= Math.min(size, share);
  });
  return messages.map((m) => {
    const share = shares.get(m);
    if (share === undefined || sizeOf([m]) <= share) return m;
    const n = narrowed(m, sources.get(m)!, share);
    // a message smaller than its note stays whole: narrowing never makes a request larger
    return sizeOf([n]) < sizeOf([m]) ? n : m;
  });
}

/** The tool message `m` narrowed to at most `share` characters of JSON (or to its note alone, when the note does not fit). */
function narrowed(m: Message, source: Source, share: number): Message {
  const whole = typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? '');
  const build = (shown: number): Message => {
    const note =
      `[narrowed to fit the context budget] This ${m.role === 'tool' ? 'tool message' : 'earlier reply'} is ${whole.length} characters; only its first ${shown} are shown, ` +
      `${whole.length - shown} were left out. The whole is kept in ${source.where}` +
      (source.sha256
        ? ` (sha256 ${source.sha256}${source.resultRef ? `, stored as ${source.resultRef.bucket}/${source.resultRef.key}, ${source.resultRef.bytes} bytes` : ''})`
        : '') +
      '. Do not treat the left-out part as empty or missing data: ask for a narrower result (fewer rows or one fund) if you need it.';
    if (m.role !== 'tool') return { ...m, content: `${whole.slice(0, shown)}\n\n${note}` };
    return {
      role: 'tool',
      tool_call_id: m.tool_call_id,
      content: JSON.stringify({
        narrowed: {
          note,
          shownCharacters: shown,
          totalCharacters: whole.length,
          ...(source.sha256 ? { sha256: source.sha256 } : {}),
          ...(source.resultRef ? { resultRef: source.resultRef } : {}),
        },
        excerpt: whole.slice(0, shown),
      }),
    };
  };
  let shown = Math.max(0, share - sizeOf([build(0)]));
  // the excerpt's escaping can make it longer than its characters: shrink until it fits
  for (let i = 0; i < 8 && shown > 0; i++) {
    const over = sizeOf([build(shown)]) - share;
    if (over <= 0) break;
    shown = Math.max(0, shown - over);
  }
  // never split a surrogate pair
  if (shown > 0 && /[\uD800-\uDBFF]/.test(whole[shown - 1] ?? '')) shown--;
  return build(shown);
}
