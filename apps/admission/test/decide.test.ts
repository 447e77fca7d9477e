import { describe, expect, it } from '@jest/globals';
import { admissionIds, decide, MessageConflict, RunAlreadySettled, RunNotFound } from '../src/decide.js';
import { sha256Hex } from '@runplane/contracts';
import { emptyFacts } from '@runplane/run-facts';
import { History } from '../../../test/support/history.js';
import { spec } from '../../../test/support/decider-spec.js';
import { postMessage } from './commands.js';

const admission = spec(decide);
const post = postMessage;
const { runId, messageId } = admissionIds('conv-1', 'client-1');

describe('admission decide (K1)', () => {
  it('given no admission, when a message arrives, then one Run is admitted with ids derived from the client id and the deadline from the clock', () => {
    const [e] = admission
      .given([])
      .when(post(), new Date('2026-01-01T00:00:00Z'))
      .then([
        {
          type: 'run.admitted',
          data: {
            message: { messageId, clientMessageId: 'client-1', content: 'Compare SPY and QQQ', contentSha256: sha256Hex('Compare SPY and QQQ') },
            grant: { tools: ['list_funds'], model: 'm' },
            limits: { maxModelRequests: 4, maxToolCalls: 4, deadlineAt: '2026-01-01T00:01:00.000Z' },
            conversationHistory: { runIds: [] },
          },
        },
      ]);
    expect(e!.runId).toBe(runId);
  });

  const admitted = () => {
    const [e] = decide(emptyFacts(runId), post(), new Date('2026-01-01T00:00:00Z'));
    return [{ seq: 1, subject: `rp.run.${runId}.admission`, event: e! }];
  };

  it('given an admission, when the same id and text arrive again, then nothing is appended (the caller returns the existing ids)', () => {
    admission
      .given(admitted())
      .when(post({ requestId: 'req-2' }), new Date('2026-01-02T00:00:00Z'))
      .thenNothing();
  });

  it('given an admission, when the same id arrives with other text, then it is a conflict that names the field', () => {
    admission
      .given(admitted())
      .when(post({ content: 'other' }))
      .thenThrows(MessageConflict);
    admission
      .given(admitted())
      .when(post({ content: 'other' }))
      .thenThrows(/different content/);
  });

  it('the same client id in two conversations names two Runs; the same pair always the same Run', () => {
    expect(admissionIds('a', 'x').runId).not.toBe(admissionIds('b', 'x').runId);
    expect(admissionIds('a', 'x')).toEqual(admissionIds('a', 'x'));
  });

  describe('cancel (K4)', () => {
    const cancel = { type: 'CancelRun', principal: null, requestedBy: 'ana', reason: 'wrong fund', requestId: 'req-9' } as const;
    it('given an admitted Run, when its user cancels, then the cancel intent is recorded once', () => {
      admission
        .given(new History().admitted())
        .when(cancel)
        .then([{ type: 'run.cancel.requested', data: { requestedBy: 'ana', reason: 'wrong fund' } }]);
      const canceled = new History().admitted().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: 'wrong fund' });
      admission.given(canceled).when(cancel).thenNothing();
    });
    it('given no such Run, then RunNotFound; given a settled Run, then RunAlreadySettled with its outcome', () => {
      admission.given(new History()).when(cancel).thenThrows(RunNotFound);
      const settled = new History().admitted().settled('completed', 'x');
      admission.given(settled).when(cancel).thenThrows(RunAlreadySettled);
      admission
        .given(settled)
        .when(cancel)
        .thenThrows(/already settled \(completed\)/);
    });
  });
});
