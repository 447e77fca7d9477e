import { describe, expect, it } from '@jest/globals';
import { decidePublication, passageIdFor, splitPassages } from '@runplane/app-publication';
import { History } from '../../../test/support/history.js';

describe('publication: passages are committed from the answer turn', () => {
  it('splits on blank lines, trims, drops empties', () => {
    expect(splitPassages('One.\n\n  Two.\r\n\r\nThree.\n \n\n')).toEqual(['One.', 'Two.', 'Three.']);
  });

  it('given an answered Run, then it commits each passage (version 1) and then answer.published', () => {
    const h = new History().admitted().turn(1, { content: 'A.\n\nB.' }).add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    const events = decidePublication(h.facts);
    expect(events.map((e) => e.type)).toEqual(['passage.committed', 'passage.committed', 'answer.published']);
    expect(events.every((e) => e.owner === 'publication')).toBe(true);
  });

  it('given some passages already committed (redelivery), then only the missing ones are committed, with the same ids', () => {
    const h = new History().admitted().turn(1, { content: 'A.\n\nB.' }).add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    const [p0] = decidePublication(h.facts);
    h.add('passage.committed', '0/v1', (p0 as { data: never }).data);
    const rest = decidePublication(h.facts);
    expect(rest.map((e) => e.type)).toEqual(['passage.committed', 'answer.published']);
    expect(rest[0]?.type === 'passage.committed' && rest[0].data.passageId).toBe(passageIdFor('run-1', 1));
  });

  it('given a Run stopped without an answer, then nothing is published', () => {
    const h = new History().admitted().turn(1, { content: '' }).add('run.execution.finished', 'finished', { reason: 'empty-output', detail: '', answerTurn: null });
    expect(decidePublication(h.facts)).toEqual([]);
  });
});
