/**
 * The runtime's handover rules (a drain, K6, K10): a draining holder records `run.handed_over`
 * under its own epoch only at a safe point as the log shows it; the record closes its epoch, and it
 * is the wake the next holder takes the Run with at the next epoch.
 */
import { describe, expect, it } from '@jest/globals';
import { decide } from '../src/decide.js';
import { epochSuperseded, handedOverAt } from '@runplane/run-facts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const handOver = (epoch = 1) => ({ type: 'HandOver' as const, epoch, holder, reason: 'drain' as const });
const granted = (h: History, epoch = 1) => h.add('lease.granted', `lease/${epoch}`, { epoch, holder, ttlMs: 1500 });
const handedOver = (epoch: number, pendingToolCalls: number) => ({
  type: 'run.handed_over' as const,
  data: { epoch, holder, reason: 'drain' as const, pendingToolCalls },
});
/** A Run whose turn 1 finished with a proposed call still without its receipt (a safe point: no model request in flight). */
const waitingOnTool = () =>
  granted(new History().admitted())
    .turn(1, { calls: [{ id: 'c1', name: 'list_funds' }] })
    .proposed(1, 'c1', 'list_funds')
    .dispatched('c1', 'list_funds');

describe('runtime decide: HandOver (drain)', () => {
  it('given a turn finished and its tool call proposed, when the draining holder hands over, then run.handed_over under its epoch, naming the pending call', () => {
    runtime
      .given(waitingOnTool())
      .when(handOver(1))
      .then([handedOver(1, 1)]);
  });

  it('given the Run admitted and nothing requested yet, when the holder hands over, then run.handed_over with nothing pending', () => {
    runtime
      .given(granted(new History().admitted()))
      .when(handOver(1))
      .then([handedOver(1, 0)]);
  });

  it('given a model turn requested without its outcome, when the holder hands over, then nothing: not a safe point (the Run is released stopping and fenced instead)', () => {
    runtime
      .given(granted(new History().admitted()).add('model.turn.requested', 1, { turn: 1, model: 'scripted' }))
      .when(handOver(1))
      .thenNothing();
  });

  it('given the Run handed over at this epoch already, when asked again, then nothing (once per epoch)', () => {
    const h = waitingOnTool().add('run.handed_over', 'handover/1', handedOver(1, 1).data);
    runtime.given(h).when(handOver(1)).thenNothing();
  });

  it('given a Run parked on a question for a human, a cancel, or a fence, when the holder hands over, then nothing', () => {
    const parked = granted(new History().admitted({ tools: ['list_funds', 'ask_human'] }))
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] })
      .waitOpened(1, 'q', 'Which?');
    runtime.given(parked).when(handOver(1)).thenNothing();
    runtime
      .given(waitingOnTool().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: null }))
      .when(handOver(1))
      .thenNothing();
    runtime.given(waitingOnTool().fenced('lease-expired')).when(handOver(1)).thenNothing();
  });

  it('given a later epoch granted, when the holder of the older one hands over, then nothing (its epoch is closed)', () => {
    runtime.given(granted(waitingOnTool(), 2)).when(handOver(1)).thenNothing();
  });
});

describe('run-facts: a handover closes its epoch and is the wake of the next', () => {
  it('given run.handed_over at epoch 1, then epoch 1 may write nothing more, epoch 2 may, and the Run may be taken from epoch 1', () => {
    const facts = waitingOnTool().add('run.handed_over', 'handover/1', handedOver(1, 1).data).facts;
    expect(epochSuperseded(facts, 1)).toBe(true);
    expect(epochSuperseded(facts, 2)).toBe(false);
    expect(handedOverAt(facts)).toBe(1);
  });

  it('given the next epoch granted after the handover, or the Run fenced, then it is no longer a handover to take', () => {
    const h = waitingOnTool().add('run.handed_over', 'handover/1', handedOver(1, 1).data);
    expect(handedOverAt(granted(h, 2).facts)).toBeNull();
    const fenced = waitingOnTool().add('run.handed_over', 'handover/1', handedOver(1, 1).data).fenced('deadline');
    expect(handedOverAt(fenced.facts)).toBeNull();
  });

  it('given no handover, then nothing to take', () => {
    expect(handedOverAt(waitingOnTool().facts)).toBeNull();
  });
});
