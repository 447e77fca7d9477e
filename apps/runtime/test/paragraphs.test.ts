import { describe, expect, it } from '@jest/globals';
import { ParagraphStream, splitPassages } from '@runplane/contracts';
import { ParagraphRecorder } from '@runplane/app-runtime';

describe('ParagraphStream: a paragraph is finished once a blank line follows it', () => {
  it('reports each paragraph once its separator is complete, never the last one, and always the first passages of the whole text', () => {
    const text = 'One.\n\nTwo, in\npieces.\r\n \r\nThree.\n\n\n\nFour';
    for (const size of [1, 2, 3, 5, 8, 64]) {
      const stream = new ParagraphStream();
      const seen: { index: number; text: string }[] = [];
      for (let i = 0; i < text.length; i += size) seen.push(...stream.push(text.slice(i, i + size)));
      expect(seen).toEqual(
        splitPassages(text)
          .slice(0, 3)
          .map((t, index) => ({ index, text: t })),
      );
    }
  });

  it('reports nothing for text without a complete separator', () => {
    const stream = new ParagraphStream();
    expect(stream.push('One.\n')).toEqual([]);
    expect(stream.push(' ')).toEqual([]);
    expect(stream.push('\n')).toEqual([{ index: 0, text: 'One.' }]);
  });
});

describe('ParagraphRecorder: records without holding the stream up', () => {
  it('records one batch at a time, coalescing the paragraphs finished meanwhile, and drops what has not started on close', async () => {
    const batches: number[][] = [];
    const gates: (() => void)[] = [];
    const recorder = new ParagraphRecorder(
      (ps) => {
        batches.push(ps.map((p) => p.index));
        return new Promise<void>((r) => gates.push(r));
      },
      () => undefined,
    );
    recorder.push('A.\n\n');
    recorder.push('B.\n\n');
    recorder.push('C.\n\n');
    expect(batches).toEqual([[0]]);
    gates.shift()!();
    await new Promise((r) => setTimeout(r, 0));
    expect(batches).toEqual([[0], [1, 2]]);
    recorder.push('D.\n\n');
    const closing = recorder.close();
    gates.shift()!();
    await closing;
    expect(batches).toEqual([[0], [1, 2]]);
    expect(recorder.finished).toBe(4);
  });

  it('reports a failed recording and goes on with the next', async () => {
    const errors: unknown[] = [];
    const seen: number[] = [];
    let fail = true;
    const recorder = new ParagraphRecorder(
      async (ps) => {
        if (fail) {
          fail = false;
          throw new Error('conflict');
        }
        seen.push(...ps.map((p) => p.index));
      },
      (e) => errors.push(e),
    );
    recorder.push('A.\n\n');
    recorder.push('B.\n\n');
    await new Promise((r) => setTimeout(r, 10));
    await recorder.close();
    expect(errors).toHaveLength(1);
    expect(seen).toEqual([1]);
  });
});
