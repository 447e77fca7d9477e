import { describe, expect, it } from '@jest/globals';
import { decide, ReconcileConflict, ReconcileNotFound, type ReconcileToolCall } from '../src/decide.js';
import { spec } from '../../../test/support/decider-spec.js';
import { History, unknownEffectCall } from '../../../test/support/history.js';

const admission = spec(decide);
const reconcile = (over: Partial<ReconcileToolCall> = {}): ReconcileToolCall => ({
  type: 'ReconcileToolCall',
  toolCallId: 'e',
  outcome: 'succeeded',
  evidence: 'the line is in effects.log',
  operator: 'ops-ada',
  requestId: 'req-1',
  ...over,
});
const unknownCall = unknownEffectCall;

describe('admission decide, ReconcileToolCall: an operator reconciles an unknown call (K5)', () => {
  it('given an unknown call, then the reconciliation is recorded with who, outcome and evidence', () => {
    admission
      .given(unknownCall())
      .when(reconcile())
      .then([
        {
          type: 'tool.call.reconciled',
          data: {
            toolCallId: 'e',
            name: 'record_effect',
            outcome: 'succeeded',
            evidence: 'the line is in effects.log',
            operator: 'ops-ada',
            requestId: 'req-1',
          },
        },
      ]);
  });

  it('given it was reconciled so before, then nothing (idempotent)', () => {
    const h = unknownCall().add('tool.call.reconciled', 'e', {
      toolCallId: 'e',
      name: 'record_effect',
      outcome: 'succeeded',
      evidence: 'the line is in effects.log',
      operator: 'ops-ada',
      requestId: 'req-0',
    });
    admission
      .given(h)
      .when(reconcile({ requestId: 'req-2' }))
      .thenNothing();
    admission
      .given(h)
      .when(reconcile({ outcome: 'not_executed' }))
      .thenThrows(ReconcileConflict);
  });

  it('given a call whose receipt is not unknown, or that has none, then a conflict', () => {
    const ok = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'e', name: 'list_funds' }] })
      .proposed(1, 'e', 'list_funds')
      .dispatched('e', 'list_funds');
    admission.given(ok).when(reconcile()).thenThrows(ReconcileConflict);
    admission
      .given(ok.receipt('e', 'list_funds', 'succeeded'))
      .when(reconcile())
      .thenThrows(ReconcileConflict);
  });

  it('given a dispatched call left without a receipt by a fence (its runtime was lost mid-call), then it can be reconciled (K5)', () => {
    const cut = new History()
      .admitted({ tools: ['record_effect'] })
      .turn(1, { calls: [{ id: 'e', name: 'record_effect' }] })
      .proposed(1, 'e', 'record_effect')
      .dispatched('e', 'record_effect')
      .add('run.fenced', 'lost/tools', {
        fencedSubject: 'tools',
        epoch: 1,
        holder: { service: 'runtime', instance: 'i-1' },
        reason: 'lease-expired',
        detail: 'lease expired',
        uncertain: [{ kind: 'tool-call', toolCallId: 'e', name: 'record_effect' }],
      });
    admission
      .given(cut)
      .when(reconcile())
      .then([{ type: 'tool.call.reconciled', data: expect.objectContaining({ toolCallId: 'e', outcome: 'succeeded' }) as never }]);
  });

  it('given no such Run or call, then not found', () => {
    admission.given(new History()).when(reconcile()).thenThrows(ReconcileNotFound);
    admission
      .given(unknownCall())
      .when(reconcile({ toolCallId: 'other' }))
      .thenThrows(ReconcileNotFound);
  });

  it('given a settled Run, then the reconciliation is still recorded (it changes no outcome)', () => {
    const h = unknownCall().add('run.settled', 'settlement', {
      outcome: 'completed',
      reason: 'answered',
      passageIds: [],
      receipts: [{ toolCallId: 'e', name: 'record_effect', status: 'unknown' }],
      usage: { modelRequests: 2, toolCalls: 1, promptTokens: 0, completionTokens: 0 },
    });
    admission
      .given(h)
      .when(reconcile())
      .then([{ type: 'tool.call.reconciled', data: expect.objectContaining({ outcome: 'succeeded' }) as never }]);
  });
});
