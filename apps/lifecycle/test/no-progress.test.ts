/** The lifecycle settles a Run fenced `no-progress` (K7, K9): `failed`, saying no answer was produced, or `partial` when text was committed. */
import { describe, expect, it } from '@jest/globals';
import { History } from '../../../test/support/history.js';
import { settles } from './lifecycle-spec.js';

/** Recovery's fence after 60 s of silence, with model turn 1 in flight. */
const fence = (h: History) =>
  h.fenced('no-progress', 1, { detail: 'no progress for 60 s (limit 60 s)', uncertain: [{ kind: 'model-turn', turn: 1 }] });

describe('lifecycle decide: a Run fenced no-progress (K7, K9)', () => {
  it('given no text committed, when woken, then settled failed: no answer was produced', () => {
    const h = fence(new History().admitted({ noProgressSeconds: 60 }).add('model.turn.requested', 1, { turn: 1, model: 'scripted' }));
    settles(h, {
      outcome: 'failed',
      reason: 'no-progress: no answer was produced: no progress for 60 s (limit 60 s); outcome unknown: model turn 1',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0, unknownUsageTurns: 1 },
      unanswered: [],
      pendingChildRunIds: [],
    });
  });

  it('given a passage committed before the silence, when woken, then settled partial keeping it', () => {
    const h = new History()
      .admitted({ noProgressSeconds: 60 })
      .add('model.turn.requested', 1, { turn: 1, model: 'scripted' })
      .add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'First part.', sha256: 'a'.repeat(64) })
      .add('passage.committed', 'p0', { passageId: 'p0', index: 0, version: 1, text: 'First part.', sha256: 'a'.repeat(64), sourceTurn: 1 });
    const settled = settles(fence(h), expect.objectContaining({ outcome: 'partial', passageIds: ['p0'] }));
    expect(settled.data.reason).toMatch(/^no-progress: no answer was produced: .* the 1 passage\(s\) committed before it are kept$/);
  });
});
