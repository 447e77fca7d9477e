/** The lifecycle settles a Run fenced `no-progress` (K7, K9): `failed`, saying no answer was produced, or `partial` when text was committed. */
import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-lifecycle';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const lifecycle = spec(decide);
const fence = (h: History) => {
  for (const fencedSubject of ['tools', 'runtime'] as const)
    h.add('run.fenced', `fence/1/${fencedSubject}`, {
      fencedSubject,
      epoch: 1,
      holder: { service: 'runtime', instance: 'i-1' },
      reason: 'no-progress',
      detail: 'no progress for 60 s (limit 60 s)',
      uncertain: [{ kind: 'model-turn', turn: 1 }],
    });
  return h;
};

describe('lifecycle decide: a Run fenced no-progress (K7, K9)', () => {
  it('given no text committed, when woken, then settled failed: no answer was produced', () => {
    const h = fence(new History().admitted({ noProgressSeconds: 60 }).add('model.turn.requested', 1, { turn: 1, model: 'scripted' }));
    lifecycle
      .given(h)
      .when({ type: 'Wake' })
      .then([
        {
          type: 'run.settled',
          data: {
            outcome: 'failed',
            reason: 'no-progress: no answer was produced: no progress for 60 s (limit 60 s); outcome unknown: model turn 1',
            passageIds: [],
            receipts: [],
            usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0, unknownUsageTurns: 1 },
            unanswered: [],
            pendingChildRunIds: [],
          },
        },
      ]);
  });

  it('given a passage committed before the silence, when woken, then settled partial keeping it', () => {
    const h = new History()
      .admitted({ noProgressSeconds: 60 })
      .add('model.turn.requested', 1, { turn: 1, model: 'scripted' })
      .add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'First part.', sha256: 'a'.repeat(64) })
      .add('passage.committed', 'p0', { passageId: 'p0', index: 0, version: 1, text: 'First part.', sha256: 'a'.repeat(64), sourceTurn: 1 });
    const [settled] = lifecycle
      .given(fence(h))
      .when({ type: 'Wake' })
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'partial', passageIds: ['p0'] }) }]);
    expect((settled!.data as { reason: string }).reason).toMatch(
      /^no-progress: no answer was produced: .* the 1 passage\(s\) committed before it are kept$/,
    );
  });
});
