/**
 * An unknown call stays unknown wherever it is shown (K5): to the model (the runtime's tool
 * message) and in the CLI timeline, with a late observation or an operator's reconciliation beside it.
 */
import { describe, expect, it } from '@jest/globals';
import { summarize } from '../../cli/src/render.js';
import { toolMessageContent } from '../../runtime/src/messages.js';
import { ToolMessageContent } from '@runplane/contracts';
import { unknownEffectCall } from '../../../test/support/history.js';

const unknownCall = unknownEffectCall;
const late = { toolCallId: 'e', name: 'record_effect', status: 'succeeded' as const, result: { recorded: 'x' }, durationMs: 4000, executor: 'i-1' };
const rec = {
  toolCallId: 'e',
  name: 'record_effect',
  outcome: 'not_executed' as const,
  evidence: 'no row at the destination',
  operator: 'ops-ada',
  requestId: 'r',
};

describe('an unknown call shown to the model', () => {
  it('stays unknown, with what an operator found and the late result beside it, never as success', () => {
    const h = unknownCall().add('tool.call.late_observed', 'e', late).add('tool.call.reconciled', 'e', rec);
    const content = toolMessageContent(h.facts.toolCalls.get('e')!, undefined);
    expect(ToolMessageContent.parse(content)).toEqual(content);
    expect(content).toMatchObject({
      status: 'unknown',
      reconciliation: { outcome: 'not_executed', evidence: 'no row at the destination', by: 'ops-ada' },
      lateObservation: { status: 'succeeded' },
    });
  });

  it('an unknown call without either is shown exactly as before', () => {
    expect(toolMessageContent(unknownCall().facts.toolCalls.get('e')!, undefined)).toEqual({
      status: 'unknown',
      error: { code: 'unknown', message: 'record_effect unknown' },
    });
  });
});

describe('the CLI timeline', () => {
  it('shows late observations and reconciliations as their own lines', () => {
    const h = unknownCall().add('tool.call.late_observed', 'e', late).add('tool.call.reconciled', 'e', rec);
    const lines = h.events.map((s) => summarize(s.event));
    expect(lines).toContainEqual(expect.stringMatching(/^late observation: record_effect \[e\] succeeded .*what the Run recorded does not change/));
    expect(lines).toContainEqual(expect.stringMatching(/^reconciled by ops-ada: record_effect \[e\] not_executed \(evidence: no row/));
  });
});
