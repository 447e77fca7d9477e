/**
 * How answer text becomes passages: paragraphs separated by blank lines. One definition for the
 * runtime (which records each paragraph of a streaming model turn as soon as a blank line follows
 * it, `model.output.paragraph`) and publication (which commits passages from those paragraphs and
 * from the turn's whole text), so that the paragraphs streamed so far are always the first
 * passages of the final text (docs/event-log.md, "Passages while the answer streams").
 */

/** Splits answer text into passages: paragraphs separated by blank lines, trimmed, none empty. */
export function splitPassages(text: string): string[] {
  return text
    .replace(/\r\n/g, '\n')
    .split(/\n[ \t]*\n/)
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
}

/** A finished paragraph of a streaming text: its 0-based position among the text's passages. */
export interface StreamedParagraph {
  index: number;
  text: string;
}

/**
 * Follows a text as it streams in pieces and reports each paragraph once it is finished, i.e.
 * once a blank-line separator follows it. The paragraphs reported, in order, are always the first
 * passages of {@link splitPassages} of the whole text, whatever it turns out to be (a separator,
 * once complete, cannot be changed by what follows it); the last paragraph is never reported here,
 * since nothing says it is finished before the text ends.
 *
 * Linear in the text (K8: one Run's long reply must not hold the process up): each character is
 * looked at once by a small scanner whose state carries over from piece to piece, and only the
 * unfinished paragraph is kept (as its pieces, joined once when it finishes). Nothing already
 * scanned is scanned again, whatever the number or size of the pieces.
 */
export class ParagraphStream {
  /** The pieces of text since the last complete separator (the unfinished paragraph). */
  private pieces: string[] = [];
  /**
   * The scanner: `text` inside a line; `line-start` just after a line break (only spaces or tabs
   * since); `cr` after a line break, spaces or tabs, then a carriage return. A line break seen in
   * `line-start` or `cr` completes a separator (`\r?\n[ \t]*\r?\n`).
   */
  private state: 'text' | 'line-start' | 'cr' = 'text';
  private next = 0;

  /**
   * Adds the next piece of the text.
   * @returns the paragraphs this piece finished, in order (often none).
   */
  push(piece: string): StreamedParagraph[] {
    let end = -1; // just after the last separator completed in this piece
    let state = this.state;
    for (let i = 0; i < piece.length; i++) {
      const c = piece.charCodeAt(i);
      if (c === 10 /* \n */) {
        if (state === 'text') state = 'line-start';
        else {
          end = i + 1;
          state = 'line-start'; // this line break may begin the next separator too ("\n\n\n\n")
        }
      } else if (state === 'line-start' && (c === 32 || c === 9)) {
        // spaces or tabs on an otherwise blank line
      } else if (state === 'line-start' && c === 13 /* \r */) state = 'cr';
      else state = 'text';
    }
    this.state = state;
    if (end < 0) {
      if (piece.length > 0) this.pieces.push(piece);
      return [];
    }
    this.pieces.push(piece.slice(0, end));
    const done = this.pieces.join('');
    this.pieces = end < piece.length ? [piece.slice(end)] : [];
    return splitPassages(done).map((text) => ({ index: this.next++, text }));
  }

  /** How many paragraphs were reported so far. */
  get finished(): number {
    return this.next;
  }
}
