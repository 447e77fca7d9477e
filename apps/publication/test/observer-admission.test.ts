/**
 * The admission of observer streams (`GET /v1/runs/{runId}/events`) per principal and per
 * publication process, as a decider: given the streams that opened and closed, when a principal
 * asks for one more, then it is admitted or refused with its problem (429 `observer_limit`, 503
 * `observer_capacity`, each naming its setting, with `Retry-After`). Also the gate that keeps the
 * counts, whose release counts once however often a stream's end calls it, and the settings.
 */
import { describe, expect, it } from '@jest/globals';
import { loadConfig, ObserverConfig } from '@runplane/contracts';
import {
  decideObserver,
  evolveObservers,
  initialObserverCounts,
  OBSERVER_RETRY_AFTER_SECONDS,
  ObserverGate,
  observerCapsOf,
  type ObserverCaps,
  type ObserverEvent,
  type ObserverPrincipal,
  type ObserverRefusal,
} from '../src/observer-admission.js';

const CAPS: ObserverCaps = { perProcess: 5, perPrincipal: 3 };
const opened = (principal: ObserverPrincipal, n = 1): ObserverEvent[] => Array.from({ length: n }, () => ({ type: 'ObserverOpened', principal }));
const closed = (principal: ObserverPrincipal): ObserverEvent => ({ type: 'ObserverClosed', principal });

/** given(streams opened and closed).when(principal asks).then admitted / refused. */
const observers = (caps: ObserverCaps = CAPS) => ({
  given(events: ObserverEvent[]) {
    const counts = events.reduce(evolveObservers, initialObserverCounts);
    return {
      when(principal: ObserverPrincipal) {
        const decision = decideObserver({ type: 'OpenObserver', principal }, counts, caps);
        return {
          thenAdmitted() {
            expect(decision).toEqual({ admitted: true });
          },
          thenRefused(expected: Partial<ObserverRefusal>) {
            expect(decision.admitted).toBe(false);
            const refusal = (decision as { refusal: ObserverRefusal }).refusal;
            expect(refusal).toMatchObject({ retryAfterSeconds: OBSERVER_RETRY_AFTER_SECONDS, ...expected });
            return refusal;
          },
        };
      },
    };
  },
});

describe('observer admission: per principal', () => {
  it('given no stream open, when alice asks, then she is admitted', () => {
    observers().given([]).when('alice').thenAdmitted();
  });

  it('given alice holds one stream fewer than her cap, when she asks, then she is admitted (the Nth stream)', () => {
    observers().given(opened('alice', 2)).when('alice').thenAdmitted();
  });

  it('given alice holds her cap, when she asks, then 429 observer_limit naming RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL, with the cap and her count', () => {
    const refusal = observers()
      .given(opened('alice', 3))
      .when('alice')
      .thenRefused({ status: 429, code: 'observer_limit', setting: 'RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL', limit: 3, open: 3 });
    expect(refusal.detail).toContain('RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL=3');
  });

  it('given alice holds her cap, when bob asks, then bob is admitted: one principal does not use up another', () => {
    observers().given(opened('alice', 3)).when('bob').thenAdmitted();
  });

  it('given alice held her cap and one of her streams ended, when she asks, then she is admitted again', () => {
    observers()
      .given([...opened('alice', 3), closed('alice')])
      .when('alice')
      .thenAdmitted();
  });

  it('given an admin (its sub, "ops") holds the cap, when it asks, then it is refused like any principal', () => {
    observers().given(opened('ops', 3)).when('ops').thenRefused({ status: 429, code: 'observer_limit' });
  });
});

describe('observer admission: per process', () => {
  it('given the process holds its cap over several principals, when a principal with none asks, then 503 observer_capacity naming RUNPLANE_OBSERVER_STREAMS_MAX', () => {
    const refusal = observers()
      .given([...opened('alice', 3), ...opened('bob', 2)])
      .when('carol')
      .thenRefused({ status: 503, code: 'observer_capacity', setting: 'RUNPLANE_OBSERVER_STREAMS_MAX', limit: 5, open: 5 });
    expect(refusal.detail).toContain('RUNPLANE_OBSERVER_STREAMS_MAX=5');
  });

  it('given the process holds one fewer than its cap, when a principal asks, then it is admitted (the Nth stream)', () => {
    observers()
      .given([...opened('alice', 3), ...opened('bob', 1)])
      .when('carol')
      .thenAdmitted();
  });

  it('given the process is full and alice at her cap, when alice asks, then 429: her own excess is what she is told', () => {
    observers()
      .given([...opened('alice', 3), ...opened('bob', 2)])
      .when('alice')
      .thenRefused({ status: 429, code: 'observer_limit' });
  });

  it('given authentication disabled (no principal told apart), when streams beyond the per-principal cap are asked, then only the process cap refuses', () => {
    observers().given(opened(null, 4)).when(null).thenAdmitted();
    observers().given(opened(null, 5)).when(null).thenRefused({ status: 503, code: 'observer_capacity' });
  });
});

describe('observer counts', () => {
  it('a close of a stream that was not counted changes nothing (never below zero)', () => {
    expect([closed('alice')].reduce(evolveObservers, initialObserverCounts)).toEqual(initialObserverCounts);
    const counts = [...opened('bob'), closed('alice')].reduce(evolveObservers, initialObserverCounts);
    expect([counts.open, Object.fromEntries(counts.byPrincipal)]).toEqual([1, { bob: 1 }]);
  });

  it('the gate counts what it admits, nothing it refuses, and each release once however often it is called', () => {
    const gate = new ObserverGate({ perProcess: 5, perPrincipal: 2 });
    const a1 = gate.open('alice');
    const a2 = gate.open('alice');
    const a3 = gate.open('alice');
    expect([a1.admitted, a2.admitted, a3.admitted]).toEqual([true, true, false]);
    expect(gate.current.open).toBe(2);
    if (!a1.admitted) throw new Error('unreachable');
    a1.release();
    a1.release(); // client close and settlement both end the same stream
    expect([gate.current.open, gate.current.byPrincipal.get('alice')]).toEqual([1, 1]);
    expect(gate.open('alice').admitted).toBe(true);
  });
});

describe('observer settings (contracts ObserverConfig)', () => {
  it('default to 500 per process and 20 per principal', () => {
    expect(observerCapsOf(loadConfig(ObserverConfig, {}))).toEqual({ perProcess: 500, perPrincipal: 20 });
  });

  it('take a per-principal cap above the per-process one: the process cap then binds first', () => {
    const caps = observerCapsOf(loadConfig(ObserverConfig, { RUNPLANE_OBSERVER_STREAMS_MAX: '5' }));
    expect(caps).toEqual({ perProcess: 5, perPrincipal: 20 });
    observers(caps).given(opened('alice', 5)).when('alice').thenRefused({ status: 503, code: 'observer_capacity' });
  });
});
