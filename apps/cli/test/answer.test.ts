/**
 * What `ask` and the demo print as the answer (docs/cli.md "What `ask` and the demo print"): the
 * passages together, the latest version of each, exactly the published ones once
 * `answer.published` is seen, every committed one in order before; never a protocol line between
 * them.
 */
import { describe, expect, it } from '@jest/globals';
import { makeEvent, type RunEvent } from '@runplane/contracts';
import { AnswerAssembly, renderAnswer, summarize } from '@runplane/app-cli';

const ctx = { runId: 'r1', conversationId: 'c1', correlationId: 'm1', causationId: null };
const sha = '0'.repeat(64);
const passage = (turn: number, index: number, text: string, version = 1) =>
  makeEvent(
    'passage.committed',
    ctx,
    `${turn}/${index}/v${version}`,
    { passageId: `p-${turn}-${index}`, index, version, text, sourceTurn: turn, sha256: sha },
    new Date(),
  ) as RunEvent;
const published = (ids: string[]) =>
  makeEvent('answer.published', ctx, 'answer', { passageIds: ids, characters: 1, sourceTurn: 2, unanswered: [] }, new Date()) as RunEvent;

describe('AnswerAssembly', () => {
  it('once published: exactly the listed passages, in their order, at their latest version; text of other turns left out', () => {
    const a = new AnswerAssembly();
    for (const e of [
      passage(1, 0, 'Looking up the files.'),
      passage(2, 0, 'First paragraph, as streamed.'),
      passage(2, 1, 'Second paragraph.'),
      passage(2, 0, 'First paragraph, final.', 2),
      passage(2, 0, 'a stale redelivery of version 1'),
      published(['p-2-0', 'p-2-1']),
    ])
      a.add(e);
    expect(a.texts()).toEqual(['First paragraph, final.', 'Second paragraph.']);
  });

  it('before an answer is published (failed, canceled, interrupted after text): every committed passage by turn, then index', () => {
    const a = new AnswerAssembly();
    for (const e of [passage(2, 1, 'b'), passage(1, 0, 'a'), passage(2, 0, 'c')]) a.add(e);
    expect(a.texts()).toEqual(['a', 'c', 'b']);
  });
});

describe('renderAnswer', () => {
  it('puts the passages together under one heading, separated by blank lines only', () => {
    expect(renderAnswer(['One.', 'Two.'])).toBe('\nAnswer:\n\nOne.\n\nTwo.');
    expect(renderAnswer([])).toBe('\nAnswer: none (no passage was committed)');
    expect(renderAnswer(['One.'], false)).toBe('\nAnswer so far (no settlement seen):\n\nOne.');
    // not seen is not "not committed" (a trial's publication was unreachable, and the Run had completed)
    expect(renderAnswer([], false)).toBe('\nAnswer so far (no settlement seen): none seen (passages committed meanwhile could not be read here)');
  });
});

describe('summarize answer.published', () => {
  it('says its count is of passage text, so a reader does not take it for the model turn count (a fresh user saw 1,572 then 1,510)', () => {
    const line = summarize(published(['p-2-0', 'p-2-1']));
    expect(line).toBe(
      "answer published: 2 passage(s), 1 chars of passage text (the turn's text less the blank lines between paragraphs and any unanswered block)",
    );
  });
});

describe('summarize passage.committed', () => {
  it("counts a passage from 1 within its turn, as the Run viewer does (the event's index counts from 0)", () => {
    expect(summarize(passage(3, 0, 'Held: 30 securities.'))).toBe('passage 1 of turn 3 committed (v1, 20 chars)');
    expect(summarize(passage(3, 4, 'Gaps.', 2))).toBe('passage 5 of turn 3 committed (v2, 5 chars)');
  });
});
