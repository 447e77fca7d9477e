/**
 * Builds the model's view of a Run from its facts: the question, each completed turn, and each
 * tool call's receipt as the model reads it (`ToolMessageContent`: unknown stays unknown, K5).
 */
import { z } from 'zod';
import {
  clarificationIdOf,
  ParkingToolPack,
  ToolPack,
  UNANSWERED_FENCE,
  waitIdOf,
  type ProposedToolCall,
  type ToolMessageContent,
  type ToolName,
} from '@runplane/contracts';
import type { ToolCallFacts, RunFacts } from '@runplane/run-facts';
import type OpenAI from 'openai';
import { contextMessages, project, type Segment } from './context.js';
import { planCalls, type CallPlan } from './parking.js';

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
  const pack: Record<string, { args: z.ZodType; description: string }> = { ...ToolPack, ...ParkingToolPack };
  return granted
    .filter((n): n is ToolName => n in pack)
    .map((name) => {
      const { $schema: _drop, ...parameters } = z.toJSONSchema(pack[name]!.args, { io: 'input' }) as Record<string, unknown>;
      return { type: 'function', function: { name, description: pack[name]!.description, parameters } };
    });
}

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
  if (r.outcome === 'completed') return { status: 'succeeded', result: { childRunId: child.childRunId, outcome: r.outcome, answer: r.answer } };
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
 * always sent, and a tool call never travels without its result.
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
  for (const turn of facts.turns) {
    const done = turn.completed;
    if (!done) continue;
    if (done.toolCalls.length === 0) {
      turns.push([{ role: 'assistant', content: done.content }]);
      continue;
    }
    const group: Message[] = [
      {
        role: 'assistant',
        content: done.content === '' ? null : done.content,
        tool_calls: done.toolCalls.map((c) => ({ id: c.toolCallId, type: 'function', function: { name: c.name, arguments: c.argumentsText } })),
      },
    ];
    const plans = planCalls(facts, turn.turn, done.toolCalls, new Date(turn.completedAt ?? 0));
    for (const c of done.toolCalls) {
      const plan = plans.get(c.toolCallId)!;
      if (plan.kind !== 'tool') {
        group.push({ role: 'tool', tool_call_id: c.toolCallId, content: JSON.stringify(parkingMessageContent(facts, c, plan)) });
        continue;
      }
      const call = facts.toolCalls.get(c.toolCallId);
      const content = call
        ? toolMessageContent(call, results.get(c.toolCallId))
        : toolMessageContent({ ...c, turn: turn.turn, proposedSeq: 0, dispatched: false, receipt: null }, undefined);
      group.push({ role: 'tool', tool_call_id: c.toolCallId, content: JSON.stringify(content) });
    }
    turns.push(group);
  }
  // every earlier turn may be left out whole; the latest is what the model is answering now
  turns.forEach((messages, i) => segments.push({ messages, droppable: i < turns.length - 1 }));
  return project(segments, maxChars);
}
