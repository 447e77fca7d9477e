/**
 * The runtime records its own lease grant (K6; recovery off the happy path): `lease.granted` on the runtime subject,
 * in the same decision as its first event under the lease; nothing of it in an empty decision,
 * none twice, none when the log holds that epoch (also as recovery recorded it in an older log).
 */
import { describe, expect, it } from '@jest/globals';
import { subjectTokenOf, type RunEvent } from '@runplane/contracts';
import { decide, withGrant } from '../src/decide.js';
import { History } from '../../../test/support/history.js';

const holder = { service: 'runtime', instance: 'i-1' };
const grant = (epoch = 1) => ({ epoch, holder, ttlMs: 1500 });
const now = new Date('2026-01-01T00:00:00.000Z');
const wake = { type: 'Wake', model: 'scripted' } as const;
const types = (events: RunEvent[]) => events.map((e) => e.type);

describe('runtime: its own lease grant, in its first decision under the lease (K6)', () => {
  it('given an admitted Run and the lease just taken, when the first decision requests a model turn, then the grant comes first in that same decision, on the runtime subject, owned by the runtime', () => {
    const facts = new History().admitted().facts;
    const events = withGrant(facts, grant(), decide(facts, wake, now), now);
    expect(types(events)).toEqual(['lease.granted', 'model.turn.requested']);
    expect(events[0]).toMatchObject({ owner: 'runtime', data: grant() });
    expect(events.map(subjectTokenOf)).toEqual(['runtime', 'runtime']);
  });

  it('given an empty decision, then nothing (not even the grant): a holder that writes nothing records nothing', () => {
    expect(withGrant(new History().admitted().facts, grant(), [], now)).toEqual([]);
  });

  it('given the grant of that epoch (or a later one) in the log, then the decision is left as it is: recorded once per epoch', () => {
    const turn = (h: History) => decide(h.facts, { type: 'ParagraphsStreamed', turn: 1, paragraphs: [{ index: 0, text: 'One.' }] }, now);
    const recorded = new History().admitted().add('lease.granted', 'lease/1', grant(1)).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    expect(types(withGrant(recorded.facts, grant(1), turn(recorded), now))).toEqual(['model.output.paragraph']);
    const later = new History().admitted().add('lease.granted', 'lease/2', grant(2)).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    expect(types(withGrant(later.facts, grant(1), turn(later), now))).toEqual(['model.output.paragraph']);
    // a woken Run (parked at epoch 1) taken at epoch 2: the new epoch's grant is recorded with its first event
    expect(types(withGrant(recorded.facts, grant(2), turn(recorded), now))).toEqual(['lease.granted', 'model.output.paragraph']);
  });
});
