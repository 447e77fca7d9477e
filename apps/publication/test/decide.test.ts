import { describe, expect, it } from '@jest/globals';
import { decide, passageIdFor, splitPassages } from '@runplane/app-publication';
import { sha256Hex } from '@runplane/contracts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const publication = spec(decide);
const wake = { type: 'Wake' } as const;
const answeredAB = () =>
  new History()
    .admitted()
    .turn(1, { content: 'A.\n\nB.' })
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
const passage = (index: number, text: string) =>
  ({
    type: 'passage.committed',
    data: { passageId: passageIdFor('run-1', index), index, version: 1, text, sourceTurn: 1, sha256: sha256Hex(text) },
  }) as const;

describe('publication decide: passages are committed from the answer turn', () => {
  it('splits on blank lines, trims, drops empties', () => {
    expect(splitPassages('One.\n\n  Two.\r\n\r\nThree.\n \n\n')).toEqual(['One.', 'Two.', 'Three.']);
  });

  it('given an answered Run, then it commits each passage (version 1) and then answer.published', () => {
    const events = publication
      .given(answeredAB())
      .when(wake)
      .then([
        passage(0, 'A.'),
        passage(1, 'B.'),
        { type: 'answer.published', data: { passageIds: [passageIdFor('run-1', 0), passageIdFor('run-1', 1)], characters: 4, sourceTurn: 1 } },
      ]);
    expect(events.every((e) => e.owner === 'publication')).toBe(true);
  });

  it('given some passages already committed (redelivery), then only the missing ones are committed, with the same ids', () => {
    const h = answeredAB().add('passage.committed', '0/v1', passage(0, 'A.').data);
    publication
      .given(h)
      .when(wake)
      .then([passage(1, 'B.'), { type: 'answer.published', data: expect.objectContaining({ sourceTurn: 1 }) }]);
  });

  it('given a Run stopped without an answer, then nothing is published', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: '' })
      .add('run.execution.finished', 'finished', { reason: 'empty-output', detail: '', answerTurn: null });
    publication.given(h).when(wake).thenNothing();
  });
});
