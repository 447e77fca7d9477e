/**
 * Size limits of the payloads that grow with the model or a tool (K9, K11): every one is enforced
 * where the payload enters the product, so no event ever reaches the broker's message size and
 * no fact is dropped for its size (docs/event-log.md "Sizes", docs/operations.md "Limits").
 * Sizes are bytes of the value's JSON encoding (UTF-8), what the event really takes on the wire:
 * a quote or a line break counts 2, a control character 6, a non-ASCII character 2 to 4.
 */

/**
 * The broker's largest message: NATS's default `max_payload` (1 MiB). Runplane does not raise it
 * (neither `natsAuthConfig` nor deploy/nats sets it); every limit below keeps a whole event well under it.
 */
export const BROKER_MAX_PAYLOAD_BYTES = 1024 * 1024;

/**
 * The most passages (paragraphs) of one model turn's text that are recorded: each becomes a
 * passage whose id the answer and the settlement list, so a text of many tiny paragraphs is cut
 * after this many (recorded cut, as for {@link TURN_CONTENT_MAX_BYTES}); a streamed paragraph
 * past it is not recorded on its own.
 */
export const TURN_PASSAGES_MAX = 1_000;

/**
 * The most a model turn's text takes in `model.turn.completed` (and the most one streamed
 * paragraph takes in `model.output.paragraph`): longer text is recorded cut to its first part
 * with a `cut` entry (whole size and sha256); the turn is then not an answer (K9: a cut output is
 * not success) and is retried within the budget like a length-truncated one.
 */
export const TURN_CONTENT_MAX_BYTES = 256 * 1024;

/**
 * The most one tool call's arguments take: longer arguments are recorded cut with a `cut` entry,
 * the call is never executed (nor parked on) and the model reads `arguments_too_large` as its
 * result (K5, K8: the Run continues).
 */
export const TOOL_ARGUMENTS_MAX_BYTES = 32 * 1024;

/** The most all tool calls of one turn take together (names and arguments): calls past it are recorded cut, as above. */
export const TURN_TOOL_CALLS_MAX_BYTES = 256 * 1024;

/** The most characters of a tool name the model sent that are recorded (no tool has a longer name: such a call is cut). */
export const TOOL_NAME_MAX_CHARS = 128;

/** The most characters of a model's finish reason, or of a failed request's error message, that are recorded (the rest is marked cut). */
export const REPORTED_TEXT_MAX_CHARS = 4_000;

/**
 * The most characters of material one Run carries from earlier Runs (`context.carried`), whatever
 * the context budget: at most half the budget is carried, and never more than this.
 */
export const CARRIED_MAX_CHARS = 128 * 1024;

/** The most a child Run's published answer takes in its parent's `child.run.settled`: longer answers are recorded cut (`answerCut`). */
export const CHILD_ANSWER_MAX_BYTES = 256 * 1024;

/** Bytes of `value`'s JSON encoding (UTF-8). */
export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? '', 'utf8');
}

/** Bytes one UTF-16 code unit takes inside a JSON string (a surrogate pair: 4 for both, counted on the high half). */
function unitCost(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22 || c === 0x5c) return 2;
  if (c < 0x20) return c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d ? 2 : 6;
  if (c < 0x80) return 1;
  if (c < 0x800) return 2;
  if (c >= 0xd800 && c <= 0xdbff) {
    const next = text.charCodeAt(i + 1);
    return next >= 0xdc00 && next <= 0xdfff ? 4 : 6;
  }
  if (c >= 0xdc00 && c <= 0xdfff) {
    const prev = text.charCodeAt(i - 1);
    return prev >= 0xd800 && prev <= 0xdbff ? 0 : 6;
  }
  return 3;
}

/**
 * The longest prefix of `text` whose JSON string (quotes included) takes at most `maxBytes`
 * bytes; never splits a surrogate pair. Linear in the prefix.
 */
export function cutToJsonBytes(text: string, maxBytes: number): string {
  let used = 2;
  let i = 0;
  for (; i < text.length; i++) {
    const cost = unitCost(text, i);
    const pair = cost === 4 ? 2 : 1;
    if (used + cost > maxBytes) break;
    used += cost;
    i += pair - 1;
  }
  return text.slice(0, i);
}

/**
 * A reported text (a failed request's or a tool's error message, a finish reason) as recorded: at
 * most {@link REPORTED_TEXT_MAX_CHARS} characters, marked with how much was cut.
 */
export function boundReportedText(text: string): string {
  if (text.length <= REPORTED_TEXT_MAX_CHARS) return text;
  return `${text.slice(0, REPORTED_TEXT_MAX_CHARS)}... [cut for its size: ${text.length - REPORTED_TEXT_MAX_CHARS} more characters]`;
}

/**
 * The length of the prefix of `text` that holds its first `max` passages (paragraphs separated by
 * blank lines, as `splitPassages` counts them), or null when it has no more than `max`.
 */
export function passagesPrefixLength(text: string, max: number): number | null {
  const separator = /\r?\n[ \t]*\r?\n/g;
  let count = 0;
  let start = 0;
  const segment = (from: number, to: number): boolean => text.slice(from, to).trim().length > 0;
  for (const m of text.matchAll(separator)) {
    if (segment(start, m.index)) {
      count++;
      if (count > max) return start;
    }
    start = m.index + m[0].length;
  }
  if (segment(start, text.length) && count + 1 > max) return start;
  return null;
}
