import { describe, expect, it } from '@jest/globals';
import { ParagraphStream, sha256Hex, splitPassages } from '@runplane/contracts';
import { ParagraphRecorder, progressIntervalMs } from '../src/paragraphs.js';

/** The reference: the passages of the text up to its last complete blank-line separator (every one of them is finished). */
function finishedPassages(text: string): string[] {
  let end = 0;
  for (const m of text.matchAll(/\r?\n[ \t]*\r?\n/g)) end = m.index + m[0].length;
  return splitPassages(text.slice(0, end));
}

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

  it('whatever the pieces, what it reports is the first passages of the whole text (random texts of line breaks, CRs, spaces, tabs)', () => {
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const alphabet = ['a', 'b', ' ', '\t', '\n', '\r', '\n\n', '\r\n', 'x y'];
    for (let round = 0; round < 400; round++) {
      let text = '';
      for (let i = rand(60); i > 0; i--) text += alphabet[rand(alphabet.length)];
      const stream = new ParagraphStream();
      const seen: { index: number; text: string }[] = [];
      for (let i = 0; i < text.length;) {
        const size = 1 + rand(6);
        seen.push(...stream.push(text.slice(i, i + size)));
        i += size;
      }
      expect(seen).toEqual(finishedPassages(text).map((t, index) => ({ index, text: t })));
      expect(finishedPassages(text)).toEqual(splitPassages(text).slice(0, finishedPassages(text).length));
    }
  });

  it('is linear in the text (K8): 4 MB in 32-character pieces, as paragraphs or as one paragraph, in well under a second each', () => {
    const para = 'The fund holds a broad mix of large companies, weighted by market value. '.repeat(5);
    for (const text of [(para + '\n\n').repeat(Math.ceil(4e6 / (para.length + 2))), para.repeat(Math.ceil(4e6 / para.length))]) {
      const stream = new ParagraphStream();
      const started = performance.now();
      let n = 0;
      for (let i = 0; i < text.length; i += 32) n += stream.push(text.slice(i, i + 32)).length;
      const ms = performance.now() - started;
      expect(n).toBe(finishedPassages(text).length);
      // the quadratic scan took ~2.5 s for 0.3 MB and minutes for 4 MB; linear is ~100 ms on a loaded 2-core machine
      expect(ms).toBeLessThan(3_000);
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
  /** A recorder whose every recording waits until its gate is opened (`gates`, in order); `batches`: the paragraph indexes of each recording. */
  const gatedRecorder = () => {
    const batches: number[][] = [];
    const gates: (() => void)[] = [];
    const recorder = new ParagraphRecorder(
      (ps) => {
        batches.push(ps.map((p) => p.index));
        return new Promise<void>((r) => gates.push(r));
      },
      () => undefined,
    );
    return { batches, gates, recorder };
  };

  it('records one batch at a time, coalescing the paragraphs finished meanwhile, and drops what has not started on close', async () => {
    const { batches, gates, recorder } = gatedRecorder();
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

  it('a stream that ended (close with flush) records every paragraph still queued before close returns (K9: a fast reply keeps all its paragraphs)', async () => {
    const { batches, gates, recorder } = gatedRecorder();
    for (const p of ['A.\n\n', 'B.\n\n', 'C.\n\n']) recorder.push(p);
    let closed = false;
    const closing = recorder.close({ flush: true }).then(() => (closed = true));
    recorder.push('D.\n\n'); // after close: not taken
    gates.shift()!();
    await new Promise((r) => setTimeout(r, 0));
    expect(batches).toEqual([[0], [1, 2]]);
    expect(closed).toBe(false);
    gates.shift()!();
    await closing;
    expect(batches).toEqual([[0], [1, 2]]);
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

describe('ParagraphRecorder: text streaming inside one long paragraph is progress at a bounded rate (K7)', () => {
  /** A recorder on a fake clock that records at once; returns what it recorded. */
  function recorderAt(intervalMs: number) {
    let clock = 1_000;
    const recorded: { paragraphs: number[]; progress: { characters: number; sha256: string } | null }[] = [];
    const recorder = new ParagraphRecorder(
      async (ps, progress) => {
        recorded.push({ paragraphs: ps.map((p) => p.index), progress });
      },
      () => undefined,
      { progressIntervalMs: intervalMs, now: () => clock },
    );
    const settle = () => new Promise((r) => setTimeout(r, 0));
    return { recorder, recorded, settle, advance: (ms: number) => (clock += ms) };
  }

  it('a steady stream of words without a blank line records progress once per interval, with the characters and digest of the text so far', async () => {
    const { recorder, recorded, settle, advance } = recorderAt(2_000);
    let text = '';
    for (let i = 0; i < 12; i++) {
      const piece = `word${i} `;
      text += piece;
      recorder.push(piece);
      await settle();
      if (i === 3) expect(recorded).toEqual([]); // 1.5 s in
      if (i === 4) expect(recorded).toEqual([{ paragraphs: [], progress: { characters: text.length, sha256: sha256Hex(text) } }]);
      advance(500);
    }
    // pieces at 0, 0.5, ..., 5.5 s: progress at 2 s and 4 s only
    expect(recorded.map((r) => r.progress!.characters)).toEqual([
      'word0 word1 word2 word3 word4 '.length,
      'word0 word1 word2 word3 word4 word5 word6 word7 word8 '.length,
    ]);
    expect(recorded.every((r) => r.paragraphs.length === 0)).toBe(true);
    await recorder.close();
  });

  it('keep-alive chunks (empty or whitespace-only pieces) never record progress, however long they go on', async () => {
    const { recorder, recorded, settle, advance } = recorderAt(1_000);
    for (let i = 0; i < 50; i++) {
      recorder.push(i % 2 ? '' : ' ');
      advance(500);
    }
    await settle();
    expect(recorded).toEqual([]);
    await recorder.close();
  });

  it('a short reply (shorter than the interval) records no progress; a finished paragraph restarts the interval', async () => {
    const short = recorderAt(5_000);
    short.recorder.push('The answer ');
    short.advance(1_000);
    short.recorder.push('is 42.');
    await short.settle();
    await short.recorder.close();
    expect(short.recorded).toEqual([]);

    const { recorder, recorded, settle, advance } = recorderAt(2_000);
    recorder.push('First.');
    advance(1_500);
    recorder.push('\n\nSecond ');
    await settle();
    expect(recorded).toEqual([{ paragraphs: [0], progress: null }]);
    advance(1_500); // 1.5 s after the paragraph: not yet
    recorder.push('goes on');
    await settle();
    expect(recorded).toHaveLength(1);
    advance(600);
    recorder.push(' and on');
    await settle();
    expect(recorded).toHaveLength(2);
    const soFar = 'First.\n\nSecond goes on and on';
    expect(recorded[1]).toEqual({ paragraphs: [], progress: { characters: soFar.length, sha256: sha256Hex(soFar) } });
    await recorder.close();
  });

  it('the interval is a third of the no-progress limit, at most 5 s', () => {
    expect(progressIntervalMs(5)).toBe(1_666);
    expect(progressIntervalMs(60)).toBe(5_000);
    expect(progressIntervalMs(undefined)).toBe(5_000);
  });
});
