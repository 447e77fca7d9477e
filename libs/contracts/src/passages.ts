/**
 * How answer text becomes passages: paragraphs separated by blank lines. One definition for the
 * runtime (which records each paragraph of a streaming model turn as soon as a blank line follows
 * it, `model.output.paragraph`) and publication (which commits passages from those paragraphs and
 * from the turn's whole text), so that the paragraphs streamed so far are always the first
 * passages of the final text (docs/event-log.md, "Passages while the answer streams").
 */

/** The separator of two paragraphs: a line break, optional spaces or tabs, a line break (CRLF too). */
const SEPARATOR = /\r?\n[ \t]*\r?\n/g;

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
 */
export class ParagraphStream {
  private text = '';
  /** Where the unfinished paragraph begins (just after the last separator seen). */
  private tailStart = 0;
  private next = 0;

  /**
   * Adds the next piece of the text.
   * @returns the paragraphs this piece finished, in order (often none).
   */
  push(piece: string): StreamedParagraph[] {
    this.text += piece;
    const tail = this.text.slice(this.tailStart);
    let end = -1;
    for (const m of tail.matchAll(SEPARATOR)) end = m.index + m[0].length;
    if (end < 0) return [];
    this.tailStart += end;
    return splitPassages(tail.slice(0, end)).map((text) => ({ index: this.next++, text }));
  }

  /** How many paragraphs were reported so far. */
  get finished(): number {
    return this.next;
  }
}
