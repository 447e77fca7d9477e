import { createHash, type Hash } from 'node:crypto';
import { ParagraphStream, type StreamedParagraph } from '@runplane/contracts';

/**
 * Evidence that a turn is still streaming text inside a paragraph that has not finished
 * (`model.output.progress`, K7): how many characters of the turn's text had streamed, and the
 * sha256 (hex) of that text.
 */
export interface StreamProgress {
  characters: number;
  sha256: string;
}

/** The most time between two pieces of progress evidence of a streaming turn, ms, whatever the limit. */
export const MAX_PROGRESS_INTERVAL_MS = 5_000;

/**
 * How often a turn that streams text without finishing a paragraph records progress evidence
 * (K7): `min(5 s, noProgressSeconds / 3)`, in ms, never under 100 ms; 5 s when the Run has no
 * no-progress limit. A third of the limit leaves two chances to record before the limit passes.
 * @param noProgressSeconds the Run's no-progress limit (`limits.noProgressSeconds`), seconds.
 */
export function progressIntervalMs(noProgressSeconds: number | undefined): number {
  if (noProgressSeconds === undefined) return MAX_PROGRESS_INTERVAL_MS;
  return Math.max(100, Math.min(MAX_PROGRESS_INTERVAL_MS, Math.floor((noProgressSeconds * 1000) / 3)));
}

/**
 * Records the paragraphs of one streaming model turn as they finish, without holding the stream
 * up: one recording at a time, and the paragraphs finished meanwhile go together into the next one
 * (one read of the Run, one append per paragraph), so a fast stream costs few appends.
 * `close({ flush: true })` (the stream ended) records every paragraph finished so far before it
 * returns: a reply that streams faster than it is recorded keeps all its paragraphs, even when the
 * turn's own record cannot hold its whole text (K9, K11); `close()` (the request was aborted)
 * drops what has not started. Either way it waits for the recording in flight, so that the
 * turn's record never races it on the runtime subject. A failed recording is reported to `onError` and not retried: it loses nothing the
 * turn's record does not keep.
 *
 * Progress inside one long paragraph (K7): when non-whitespace text arrived since the last
 * evidence (a finished paragraph or an earlier progress mark, or the turn's start) and at least
 * `progressIntervalMs` have passed since it, the next recording carries a {@link StreamProgress}
 * (`model.output.progress`), so a reply that streams steadily without a blank line still resets
 * the no-progress clock. Whitespace-only and empty pieces (keep-alive chunks) never cause one; a
 * reply shorter than the interval records none.
 */
export class ParagraphRecorder {
  private readonly stream = new ParagraphStream();
  private queued: StreamedParagraph[] = [];
  private queuedProgress: StreamProgress | null = null;
  private running: Promise<void> | null = null;
  private closed = false;
  /** The turn's text so far, hashed as it streams (a copy is digested for each progress mark: linear in the text, K8). */
  private readonly hash: Hash = createHash('sha256');
  private characters = 0;
  private pendingSurrogate = '';
  private newText = false;
  private lastEvidenceAt: number;
  private readonly intervalMs: number;
  private readonly now: () => number;

  /**
   * @param record appends the paragraphs and the progress evidence, if any (through the runtime's
   *   command handler and decider); called with at least one of them.
   * @param onError told about a recording that failed.
   * @param options `progressIntervalMs` (default 5 s: {@link progressIntervalMs}); `now`, the clock (ms).
   */
  constructor(
    private readonly record: (paragraphs: StreamedParagraph[], progress: StreamProgress | null) => Promise<void>,
    private readonly onError: (e: unknown) => void,
    options: { progressIntervalMs?: number; now?: () => number } = {},
  ) {
    this.intervalMs = options.progressIntervalMs ?? MAX_PROGRESS_INTERVAL_MS;
    this.now = options.now ?? Date.now;
    this.lastEvidenceAt = this.now();
  }

  /** The next piece of the turn's text, as streamed. */
  push(piece: string): void {
    if (this.closed || piece.length === 0) return;
    this.hashText(piece);
    this.characters += piece.length;
    const finished = this.stream.push(piece);
    const at = this.now();
    if (finished.length > 0) {
      this.queued.push(...finished);
      this.queuedProgress = null; // a finished paragraph is the evidence
      this.lastEvidenceAt = at;
      this.newText = false;
    } else if (/\S/.test(piece)) {
      this.newText = true;
    }
    if (this.newText && at - this.lastEvidenceAt >= this.intervalMs) {
      this.queuedProgress = { characters: this.characters, sha256: this.digestSoFar() };
      this.lastEvidenceAt = at;
      this.newText = false;
    }
    this.startNext();
  }

  /** Hashes a piece as UTF-8; a high surrogate at its end waits for the piece that completes the pair. */
  private hashText(piece: string): void {
    let text = this.pendingSurrogate + piece;
    this.pendingSurrogate = '';
    const last = text.charCodeAt(text.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) {
      this.pendingSurrogate = text.slice(-1);
      text = text.slice(0, -1);
    }
    this.hash.update(text, 'utf8');
  }

  /** The sha256 (hex) of the text so far, as `sha256Hex` of it would give, without hashing it again. */
  private digestSoFar(): string {
    const h = this.hash.copy();
    if (this.pendingSurrogate) h.update(this.pendingSurrogate, 'utf8');
    return h.digest('hex');
  }

  /** Paragraphs reported finished so far (recorded or not). */
  get finished(): number {
    return this.stream.finished;
  }

  private startNext(): void {
    if (this.running || (this.queued.length === 0 && this.queuedProgress === null)) return;
    const batch = this.queued;
    const progress = this.queuedProgress;
    this.queued = [];
    this.queuedProgress = null;
    this.running = this.record(batch, progress)
      .catch((e: unknown) => this.onError(e))
      .finally(() => {
        this.running = null;
        this.startNext();
      });
  }

  /**
   * Stops taking text. With `flush`, records what is queued (paragraphs and progress) and returns
   * once all of it was recorded or failed; without, drops it. Waits for the recording in flight.
   */
  async close(options: { flush?: boolean } = {}): Promise<void> {
    this.closed = true;
    if (!options.flush) {
      this.queued = [];
      this.queuedProgress = null;
    }
    this.startNext();
    while (this.running) await this.running;
  }
}
