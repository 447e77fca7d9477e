/**
 * Terminal rendering of a Run as it is observed: one short line per fact, the answer passages in
 * full as they are committed, and the settlement.
 */
import type { EventData, RunEvent } from '@runplane/contracts';

/** One-line summary of an event for timelines and progress output. */
export function summarize(e: RunEvent): string {
  switch (e.type) {
    case 'run.admitted':
      return `admitted message ${e.data.message.clientMessageId}: "${e.data.message.content.slice(0, 80)}"${e.data.link ? ` (${e.data.link.relation} of ${e.data.link.parentRunId})` : ''}`;
    case 'model.turn.requested':
      return `model turn ${e.data.turn} requested (${e.data.model})${e.data.purpose ? ` [${e.data.purpose}]` : ''}${e.data.retryOf ? ` [retry of turn ${e.data.retryOf}]` : ''}${e.data.maxTokens ? ` max_tokens=${e.data.maxTokens}` : ''}`;
    case 'model.turn.completed':
      return `model turn ${e.data.turn} completed: ${e.data.toolCalls.length} tool call(s), ${e.data.content.length} chars, finish=${e.data.finishReason}, ${e.data.usage ? `${e.data.usage.totalTokens} tokens` : 'usage unknown'}`;
    case 'model.turn.failed':
      return `model turn ${e.data.turn} failed: ${e.data.error.kind} ${e.data.error.message} (usage unknown)`;
    case 'tool.call.proposed':
      return `tool call proposed: ${e.data.name}(${e.data.argumentsText})`;
    case 'model.output.paragraph':
      return `model turn ${e.data.turn}: paragraph ${e.data.index} streamed (${e.data.text.length} chars)`;
    case 'tool.call.dispatched':
      return `tool call dispatched: ${e.data.name} [${e.data.toolCallId}]`;
    case 'tool.call.receipt':
      return `receipt ${e.data.status}: ${e.data.name}${e.data.effect ? ` {${e.data.effect}}` : ''}${e.data.error ? ` (${e.data.error.code}: ${e.data.error.message})` : ''}${e.data.resultRef ? ` [stored ${e.data.resultRef.bytes} B sha256:${e.data.resultRef.sha256.slice(0, 12)}]` : ''}`;
    case 'run.execution.finished':
      return `execution finished: ${e.data.reason} (${e.data.detail})`;
    case 'run.finalization.started':
      return `finalization-only: ${e.data.reason} (${e.data.detail}); unfinished: ${e.data.unfinished.map((u) => u.part).join('; ')}`;
    case 'passage.committed':
      return `passage ${e.data.index} committed (v${e.data.version}, ${e.data.text.length} chars)`;
    case 'answer.published':
      return `answer published: ${e.data.passageIds.length} passage(s), ${e.data.characters} chars${e.data.unanswered?.length ? `, ${e.data.unanswered.length} part(s) unanswered` : ''}`;
    case 'run.settled':
      return `SETTLED ${e.data.outcome}: ${e.data.reason}`;
    case 'run.cancel.requested':
      return `CANCEL requested by ${e.data.requestedBy ?? 'the user'}${e.data.reason ? `: ${e.data.reason}` : ''}`;
    case 'lease.granted':
      return `lease granted: epoch ${e.data.epoch}${e.data.epoch > 1 ? ' (woken)' : ''} to ${e.data.holder.service}/${e.data.holder.instance.slice(0, 8)} (ttl ${e.data.ttlMs} ms)`;
    case 'run.fenced': {
      const uncertain = e.data.uncertain.map((u) => (u.kind === 'model-turn' ? `model turn ${u.turn}` : `${u.name} [${u.toolCallId}]`));
      return `FENCED ${e.data.fencedSubject} (epoch ${e.data.epoch}, ${e.data.reason}): ${e.data.detail}${uncertain.length ? `; outcome unknown: ${uncertain.join(', ')}` : ''}`;
    }
    // tool effects (K5)
    case 'tool.call.late_observed':
      return `late observation after unknown: ${e.data.name} [${e.data.toolCallId}] ${e.data.status}${e.data.error ? ` (${e.data.error.code}: ${e.data.error.message})` : ''} (the recorded outcome stays unknown)`;
    case 'tool.call.reconciled':
      return `reconciled by ${e.data.operator}: ${e.data.name} [${e.data.toolCallId}] ${e.data.outcome} (evidence: ${e.data.evidence.slice(0, 120)})`;
    // waits and child Runs (K10)
    case 'wait.opened':
      return `WAIT opened ${e.data.waitId}: "${e.data.question.slice(0, 120)}" (expires ${e.data.expiresAt}); answer with: runplane answer ${e.runId} ${e.data.waitId} "<text>"`;
    case 'wait.answered':
      return `WAIT answered ${e.data.waitId} by ${e.data.answeredBy ?? 'the user'}: "${e.data.answer.slice(0, 120)}"`;
    case 'child.run.requested':
      return `CHILD requested ${e.data.childRunId}: "${e.data.question.slice(0, 100)}" (grant: ${e.data.limits.maxModelRequests} model request(s), ${e.data.limits.maxToolCalls} tool call(s), deadline ${e.data.limits.deadlineAt})`;
    case 'child.run.settled':
      return `CHILD settled ${e.data.childRunId}: ${e.data.outcome} (${e.data.answer.length} chars of answer)`;
    case 'clarification.requested':
      return `CLARIFICATION ${e.data.clarificationId}: "${e.data.question.slice(0, 120)}"`;
  }
}

/** Renders an event for the live `ask`/`demo` view: progress lines dimmed, passages in full. */
export function renderLive(e: RunEvent, seq: number): string {
  if (e.type === 'passage.committed') return `\n${e.data.text}`;
  if (e.type === 'run.settled') {
    const u = e.data.usage;
    return [
      '',
      `Settlement (by ${e.owner}): ${e.data.outcome.toUpperCase()}: ${e.data.reason}`,
      `  usage: ${u.modelRequests} model request(s), ${u.toolCalls} tool call(s), ${tokensText(u)}`,
      ...(e.data.unanswered?.length ? [`  unanswered: ${e.data.unanswered.map((p) => `${p.part} (${p.reason})`).join('; ')}`] : []),
      `  receipts: ${e.data.receipts.map((r) => `${r.name}=${r.status}`).join(', ') || 'none'}`,
    ].join('\n');
  }
  return `  #${seq} [${e.owner}] ${summarize(e)}`;
}

/**
 * A settlement's tokens as measured: unknown usage (a turn without a usage chunk, a failed or cut
 * request, a dead process) is shown as unknown with its count, never as 0 tokens (K9). A
 * settlement written before `unknownUsageTurns` existed shows its sums as they were recorded.
 */
export function tokensText(u: EventData<'run.settled'>['usage']): string {
  const unknown = u.unknownUsageTurns ?? 0;
  if (unknown === 0) return `${u.promptTokens} prompt + ${u.completionTokens} completion tokens`;
  if (unknown >= u.modelRequests) return `tokens unknown (no usage reported for any of the ${unknown} model request(s))`;
  return `at least ${u.promptTokens} prompt + ${u.completionTokens} completion tokens (usage unknown for ${unknown} of ${u.modelRequests} model request(s))`;
}
