import { ParagraphStream, type StreamedParagraph } from '@runplane/contracts';

/**
 * Records the paragraphs of one streaming model turn as they finish, without holding the stream
 * up: one recording at a time, and the paragraphs finished meanwhile go together into the next one
 * (one read of the Run, one append per paragraph), so a fast stream costs few appends. `close()`
 * drops what has not started (the turn's own record, `model.turn.completed`, holds the whole text)
 * and waits for the recording in flight, so that the turn's record never races it on the runtime
 * subject. A failed recording is reported to `onError` and not retried: it loses nothing the
 * turn's record does not keep.
 */
export class ParagraphRecorder {
  private readonly stream = new ParagraphStream();
  private queued: StreamedParagraph[] = [];
  private running: Promise<void> | null = null;
  private closed = false;

  /**
   * @param record appends the paragraphs (through the runtime's command handler and decider).
   * @param onError told about a recording that failed.
   */
  constructor(
    private readonly record: (paragraphs: StreamedParagraph[]) => Promise<void>,
    private readonly onError: (e: unknown) => void,
  ) {}

  /** The next piece of the turn's text, as streamed. */
  push(piece: string): void {
    if (this.closed) return;
    const finished = this.stream.push(piece);
    if (finished.length === 0) return;
    this.queued.push(...finished);
    this.startNext();
  }

  /** Paragraphs reported finished so far (recorded or not). */
  get finished(): number {
    return this.stream.finished;
  }

  private startNext(): void {
    if (this.running || this.closed || this.queued.length === 0) return;
    const batch = this.queued;
    this.queued = [];
    this.running = this.record(batch)
      .catch((e: unknown) => this.onError(e))
      .finally(() => {
        this.running = null;
        this.startNext();
      });
  }

  /** Stops recording: drops the paragraphs not started, waits for the one in flight. */
  async close(): Promise<void> {
    this.closed = true;
    this.queued = [];
    while (this.running) await this.running;
  }
}
