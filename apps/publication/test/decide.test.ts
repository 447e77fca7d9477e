import { describe, expect, it } from '@jest/globals';
import { decide, passageIdFor, splitPassages } from '@runplane/app-publication';
import { sha256Hex } from '@runplane/contracts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const publication = spec(decide);
const wake = { type: 'Wake' } as const;
/** A Run whose turn 1 replied `content` and which the runtime finished answered in turn 1. */
const answered = (content: string) =>
  new History().admitted().turn(1, { content }).add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
const answeredAB = () => answered('A.\n\nB.');
const passage = (index: number, text: string, turn = 1, version = 1) =>
  ({
    type: 'passage.committed',
    data: { passageId: passageIdFor('run-1', turn, index), index, version, text, sourceTurn: turn, sha256: sha256Hex(text) },
  }) as const;
const paragraph = (turn: number, index: number, text: string) => ({ turn, index, text, sha256: sha256Hex(text) });
/** A Run whose turn `turn` is in flight (requested, no outcome yet). */
const streaming = (turn = 1) => {
  const h = new History().admitted();
  for (let t = 1; t < turn; t++) h.turn(t, { calls: [{ id: `c${t}`, name: 'list_funds' }] });
  return h.add('model.turn.requested', turn, { turn, model: 'scripted' });
};
/** `h` with `texts` streamed as paragraphs 0, 1, ... of turn 1, each committed at once as version 1 of its passage. */
const streamedAndCommitted = (h: History, ...texts: string[]) => {
  texts.forEach((text, i) =>
    h.add('model.output.paragraph', `1/${i}`, paragraph(1, i, text)).add('passage.committed', `1/${i}/v1`, passage(i, text).data),
  );
  return h;
};
/** `h` with turn 1 ending with the whole `content` (no usage reported) and the runtime's finish: answered in turn 1. */
const endsAnswering = (h: History, content: string) =>
  h
    .add('model.turn.completed', 1, { turn: 1, content, toolCalls: [], finishReason: 'stop', usage: null })
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });

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
        {
          type: 'answer.published',
          data: { passageIds: [passageIdFor('run-1', 1, 0), passageIdFor('run-1', 1, 1)], characters: 4, sourceTurn: 1, unanswered: [] },
        },
      ]);
    expect(events.every((e) => e.owner === 'publication')).toBe(true);
  });

  it('given some passages already committed (redelivery), then only the missing ones are committed, with the same ids', () => {
    const h = answeredAB().add('passage.committed', '1/0/v1', passage(0, 'A.').data);
    publication
      .given(h)
      .when(wake)
      .then([passage(1, 'B.'), { type: 'answer.published', data: expect.objectContaining({ sourceTurn: 1 }) }]);
  });

  it('given an answer ending with its unanswered block, then the block is kept out of the passages and its list is on answer.published (K9)', () => {
    const block = '```json runplane-unanswered\n{"unanswered":[{"part":"holdings of XYZ","reason":"no holdings file"}]}\n```';
    const h = answered(`A.\n\nNot answered: holdings of XYZ (no holdings file).\n${block}`);
    publication
      .given(h)
      .when(wake)
      .then([
        passage(0, 'A.'),
        passage(1, 'Not answered: holdings of XYZ (no holdings file).'),
        {
          type: 'answer.published',
          data: expect.objectContaining({ unanswered: [{ part: 'holdings of XYZ', reason: 'no holdings file' }] }),
        },
      ]);
  });

  it('given a finalization answer (K9) whose text lists nothing, then the unfinished scope the runtime recorded is its unanswered list (the Run settles partial)', () => {
    const unfinished = [{ part: 'research not finished', reason: 'model request budget spent' }];
    const h = new History()
      .admitted()
      .turn(1, { content: 'From what I have: A.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: 'finalization answer in turn 1', answerTurn: 1, unfinished });
    publication
      .given(h)
      .when(wake)
      .then([passage(0, 'From what I have: A.'), { type: 'answer.published', data: expect.objectContaining({ unanswered: unfinished }) }]);
  });

  it('given an answer with an unreadable unanswered block, then the block stays in the text and the list is empty', () => {
    const text = 'A.\n\n```json runplane-unanswered\n{not json}\n```';
    const h = answered(text);
    publication
      .given(h)
      .when(wake)
      .then([
        passage(0, 'A.'),
        passage(1, '```json runplane-unanswered\n{not json}\n```'),
        { type: 'answer.published', data: expect.objectContaining({ unanswered: [] }) },
      ]);
  });

  it('given a Run stopped without an answer, then nothing is published', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: '' })
      .add('run.execution.finished', 'finished', { reason: 'empty-output', detail: '', answerTurn: null });
    publication.given(h).when(wake).thenNothing();
  });
});

describe('publication decide: passages are committed while the answer streams', () => {
  it('given a paragraph recorded while its turn streams, then it is committed at once as passage (turn, index), version 1, and nothing is published yet', () => {
    const h = streaming().add('model.output.paragraph', '1/0', paragraph(1, 0, 'First.'));
    publication
      .given(h)
      .when(wake)
      .then([passage(0, 'First.')]);
  });

  it('given that paragraph already committed, then a repeated wake commits nothing', () => {
    const h = streaming()
      .add('model.output.paragraph', '1/0', paragraph(1, 0, 'First.'))
      .add('passage.committed', '1/0/v1', passage(0, 'First.').data);
    publication.given(h).when(wake).thenNothing();
  });

  it('given two paragraphs streamed and committed and the answer ended with a third, then only the third is committed before answer.published lists all three', () => {
    const h = endsAnswering(streamedAndCommitted(streaming(), 'One.', 'Two.'), 'One.\n\nTwo.\n\nThree.');
    publication
      .given(h)
      .when(wake)
      .then([
        passage(2, 'Three.'),
        {
          type: 'answer.published',
          data: { passageIds: [0, 1, 2].map((i) => passageIdFor('run-1', 1, i)), characters: 14, sourceTurn: 1, unanswered: [] },
        },
      ]);
  });

  it('given a final text whose paragraph differs from the one committed while streaming, then it is committed as version 2 of that passage, never silently replaced', () => {
    const h = endsAnswering(streamedAndCommitted(streaming(), 'Draft.'), 'Final.\n\nTwo.');
    publication
      .given(h)
      .when(wake)
      .then([passage(0, 'Final.', 1, 2), passage(1, 'Two.'), { type: 'answer.published', data: expect.objectContaining({ characters: 10 }) }]);
  });

  it('given text streamed in a turn that then proposed tool calls, then its passage stays committed under that turn and the published answer lists only the answer turn', () => {
    const h = new History()
      .admitted()
      .add('model.turn.requested', 1, { turn: 1, model: 'scripted' })
      .add('model.output.paragraph', '1/0', paragraph(1, 0, 'Let me look.'))
      .add('passage.committed', '1/0/v1', passage(0, 'Let me look.').data)
      .add('model.turn.completed', 1, {
        turn: 1,
        content: 'Let me look.\n\n',
        toolCalls: [{ toolCallId: 'c1', name: 'list_funds', argumentsText: '{}' }],
        finishReason: 'tool_calls',
        usage: null,
      })
      .turn(2, { content: 'Answer.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });
    publication
      .given(h)
      .when(wake)
      .then([
        passage(0, 'Answer.', 2),
        { type: 'answer.published', data: { passageIds: [passageIdFor('run-1', 2, 0)], characters: 7, sourceTurn: 2, unanswered: [] } },
      ]);
  });

  it('given a paragraph recorded and the Run settled before publication committed it, then nothing is appended after the settlement', () => {
    const h = streaming()
      .add('model.output.paragraph', '1/0', paragraph(1, 0, 'First.'))
      .settled('interrupted', 'x');
    publication.given(h).when(wake).thenNothing();
  });
});
