/**
 * Every advertised length limit of the HTTP bodies holds at its edge: one below, at, one above
 * (docs/event-log.md "Sizes", K7/K8). "Characters" are Unicode characters (code points), as JSON Schema's
 * `maxLength` in docs/openapi.json counts them: a question in an astral script (emoji, rare CJK,
 * each two UTF-16 units) gets the same 20,000 as one in ASCII.
 */
import { describe, expect, it } from '@jest/globals';
import { AnswerWaitBody, CancelRunBody, Id, LastEventIdText, PostMessageBody, ReconcileToolCallBody } from '@runplane/contracts';

const ok = (schema: { safeParse(v: unknown): { success: boolean } }, v: unknown) => schema.safeParse(v).success;
const message = (content: string, clientMessageId = 'm-1') => ({ clientMessageId, content });
const ASTRAL = '\u{1F600}'; // one character, two UTF-16 units

describe('a message is at most 20,000 characters', () => {
  it.each([
    ['ASCII', 'a'],
    ['a BMP script', '\u00e9'],
    ['an astral script (two UTF-16 units each)', ASTRAL],
  ])('in %s: 19,999 and 20,000 characters are admitted, 20,001 refused with the limit named', (_name, ch) => {
    expect(ok(PostMessageBody, message(ch.repeat(19_999)))).toBe(true);
    expect(ok(PostMessageBody, message(ch.repeat(20_000)))).toBe(true);
    const over = PostMessageBody.safeParse(message(ch.repeat(20_001)));
    expect(over.success).toBe(false);
    expect(JSON.stringify(over.error?.issues)).toContain('at most 20000 characters');
  });

  it('a wait answer likewise', () => {
    expect(ok(AnswerWaitBody, { answer: ASTRAL.repeat(20_000) })).toBe(true);
    expect(ok(AnswerWaitBody, { answer: 'a'.repeat(20_000) })).toBe(true);
    expect(ok(AnswerWaitBody, { answer: 'a'.repeat(20_001) })).toBe(false);
    expect(ok(AnswerWaitBody, { answer: ASTRAL.repeat(20_001) })).toBe(false);
  });
});

describe('the other lengths', () => {
  it('clientMessageId: 200 characters, not 201', () => {
    expect(ok(PostMessageBody, message('hi', 'm'.repeat(199)))).toBe(true);
    expect(ok(PostMessageBody, message('hi', 'm'.repeat(200)))).toBe(true);
    expect(ok(PostMessageBody, message('hi', 'm'.repeat(201)))).toBe(false);
  });

  it('ids (runs, conversations, waits): 128 characters, not 129', () => {
    expect(ok(Id, 'r'.repeat(127))).toBe(true);
    expect(ok(Id, 'r'.repeat(128))).toBe(true);
    expect(ok(Id, 'r'.repeat(129))).toBe(false);
  });

  it('a cancel reason: 2,000 characters, not 2,001', () => {
    expect(ok(CancelRunBody, { reason: 'r'.repeat(1_999) })).toBe(true);
    expect(ok(CancelRunBody, { reason: 'r'.repeat(2_000) })).toBe(true);
    expect(ok(CancelRunBody, { reason: 'r'.repeat(2_001) })).toBe(false);
  });

  it("a reconciliation's evidence: 4,000 characters, not 4,001; its operator 200, not 201", () => {
    const body = (evidence: string, operator = 'ops') => ({ outcome: 'succeeded', evidence, operator });
    expect(ok(ReconcileToolCallBody, body('e'.repeat(3_999)))).toBe(true);
    expect(ok(ReconcileToolCallBody, body('e'.repeat(4_000)))).toBe(true);
    expect(ok(ReconcileToolCallBody, body('e'.repeat(4_001)))).toBe(false);
    expect(ok(ReconcileToolCallBody, body('e', 'o'.repeat(200)))).toBe(true);
    expect(ok(ReconcileToolCallBody, body('e', 'o'.repeat(201)))).toBe(false);
  });

  it('a Last-Event-ID: 15 digits, not 16', () => {
    expect(ok(LastEventIdText, '9'.repeat(14))).toBe(true);
    expect(ok(LastEventIdText, '9'.repeat(15))).toBe(true);
    expect(ok(LastEventIdText, '9'.repeat(16))).toBe(false);
    expect(ok(LastEventIdText, '0')).toBe(true);
    expect(ok(LastEventIdText, '-1')).toBe(false);
  });
});
