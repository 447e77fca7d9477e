/**
 * Recovery's no-progress rule (K7): a Run where nothing counted as progress happened for its
 * `noProgressSeconds` is fenced `no-progress`; lease grants (renewals) are not progress, a parked
 * Run is not judged by it. History times are 1 s apart from 2025-12-31T23:00:01Z (seq 1).
 */
import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-recovery';
import { bothFenced, spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const recovery = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const at = (s: string) => new Date(`2025-12-31T23:${s}.000Z`);
/** Admitted (seq 1, 23:00:01) with a 60 s limit, leased (23:00:02), a model turn requested (23:00:03) and no reply yet. */
const silent = () =>
  new History()
    .admitted({ noProgressSeconds: 60 })
    .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
    .add('model.turn.requested', 1, { turn: 1, model: 'scripted' });
const fenced = (detail: string, uncertain: { kind: 'model-turn'; turn: number }[] = [{ kind: 'model-turn', turn: 1 }]) =>
  bothFenced({ epoch: 1, holder, reason: 'no-progress', detail, uncertain });

describe('recovery decide, NoProgress (K7)', () => {
  it('given a Run silent since its admission, when the limit has not passed, then nothing', () => {
    recovery.given(silent()).when({ type: 'NoProgress' }, at('01:00')).thenNothing();
  });

  it('given a Run silent since its admission, when the limit passed, then both executor subjects are fenced no-progress', () => {
    recovery
      .given(silent())
      .when({ type: 'NoProgress' }, at('01:01'))
      .then(fenced('no progress for 60 s (limit 60 s): nothing counted as progress since 2025-12-31T23:00:01.000Z'));
  });

  it('given lease grants only (renewals, a new epoch), then they do not reset the clock', () => {
    const h = silent().add('lease.granted', 'lease/2', { epoch: 2, holder, ttlMs: 1500 });
    recovery
      .given(h)
      .when({ type: 'NoProgress' }, at('01:01'))
      .then(
        bothFenced({
          epoch: 2,
          holder,
          reason: 'no-progress',
          detail: 'no progress for 60 s (limit 60 s): nothing counted as progress since 2025-12-31T23:00:01.000Z',
          uncertain: [{ kind: 'model-turn', turn: 1 }],
        }),
      );
  });

  it('given streamed answer text, then the clock restarts at it', () => {
    const h = silent().add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'Some text.', sha256: 'a'.repeat(64) }); // 23:00:04
    recovery.given(h).when({ type: 'NoProgress' }, at('01:03')).thenNothing();
    recovery
      .given(h)
      .when({ type: 'NoProgress' }, at('01:04'))
      .then(fenced('no progress for 60 s (limit 60 s): nothing counted as progress since 2025-12-31T23:00:04.000Z'));
  });

  it('given text still streaming inside one unfinished paragraph (model.output.progress), then the clock restarts at its latest evidence', () => {
    const h = silent()
      .add('model.output.progress', '1/progress/120', { turn: 1, characters: 120, sha256: 'a'.repeat(64) }) // 23:00:04
      .add('model.output.progress', '1/progress/260', { turn: 1, characters: 260, sha256: 'b'.repeat(64) }); // 23:00:05
    recovery.given(h).when({ type: 'NoProgress' }, at('01:04')).thenNothing();
    recovery
      .given(h)
      .when({ type: 'NoProgress' }, at('01:05'))
      .then(fenced('no progress for 60 s (limit 60 s): nothing counted as progress since 2025-12-31T23:00:05.000Z'));
  });

  it('given a completed turn with a valid tool call and its receipt, then the receipt is the last progress', () => {
    const h = new History()
      .admitted({ noProgressSeconds: 60 })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'c1', name: 'list_funds' }] }) // requested 23:00:03, completed 23:00:04
      .proposed(1, 'c1', 'list_funds') // 23:00:05
      .dispatched('c1', 'list_funds') // 23:00:06 (not progress)
      .receipt('c1', 'list_funds', 'succeeded'); // 23:00:07
    recovery.given(h).when({ type: 'NoProgress' }, at('01:06')).thenNothing();
    recovery
      .given(h)
      .when({ type: 'NoProgress' }, at('01:07'))
      .then(fenced('no progress for 60 s (limit 60 s): nothing counted as progress since 2025-12-31T23:00:07.000Z', []));
  });

  it('given an empty or length-cut completed turn, then it is not progress', () => {
    const empty = silent().add('model.turn.completed', 1, { turn: 1, content: '', toolCalls: [], finishReason: 'stop', usage: null });
    recovery
      .given(empty)
      .when({ type: 'NoProgress' }, at('01:01'))
      .then(fenced(expect.any(String) as unknown as string, []));
    const cut = silent().add('model.turn.completed', 1, { turn: 1, content: 'The answer is', toolCalls: [], finishReason: 'length', usage: null });
    recovery
      .given(cut)
      .when({ type: 'NoProgress' }, at('01:01'))
      .then(fenced(expect.any(String) as unknown as string, []));
  });

  it('given a Run parked on a human, then nothing however long the wait (its expiry covers it); its answer restarts the clock', () => {
    const parked = new History()
      .admitted({ noProgressSeconds: 60, tools: ['ask_human'] })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .add('model.turn.requested', 1, { turn: 1, model: 'scripted' })
      .add('model.turn.completed', 1, { turn: 1, content: '', toolCalls: [], finishReason: 'tool_calls', usage: null })
      .waitOpened(1, 'q', 'Which?', '2026-01-01T00:00:00.000Z'); // 23:00:05
    recovery.given(parked).when({ type: 'NoProgress' }, at('30:00')).thenNothing();
    const woken = parked.waitAnswered('q', 'A'); // 23:00:06
    recovery.given(woken).when({ type: 'NoProgress' }, at('01:05')).thenNothing();
    recovery
      .given(woken)
      .when({ type: 'NoProgress' }, at('01:06'))
      .then(fenced(expect.any(String) as unknown as string, []));
  });

  it('given no limit in the grant (a Run admitted before it existed), or a finished, fenced or settled Run, then nothing', () => {
    const old = new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'scripted' });
    recovery.given(old).when({ type: 'NoProgress' }, at('59:00')).thenNothing();
    const finished = silent().add('run.execution.finished', 'finished', { reason: 'model-error', detail: 'x', answerTurn: null });
    recovery.given(finished).when({ type: 'NoProgress' }, at('05:00')).thenNothing();
    recovery.given(silent().closed()).when({ type: 'NoProgress' }, at('05:00')).thenNothing();
  });
});
