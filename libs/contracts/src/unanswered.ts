/**
 * How an answer says what it did not answer (K9): the final answer ends with a fenced block
 * `` ```json runplane-unanswered `` holding `{"unanswered":[{"part","reason"}]}`. One definition for
 * the runtime (which asks a real model for it in its system prompt), publication (which records
 * the list on `answer.published` and keeps the block out of the passages) and the scripted model's
 * research policy (which writes it). A Run whose list is not empty settles `partial` with it.
 */
import { z } from 'zod';

/** Opens the machine-readable list of unanswered parts that ends a final answer. */
export const UNANSWERED_FENCE = '```json runplane-unanswered';

/** One part of the question the answer does not answer (a fund with no data, a date, a sub-question), and why. */
export const UnansweredPart = z.object({
  part: z.string().min(1).max(2_000),
  reason: z.string().min(1).max(2_000),
});
export type UnansweredPart = z.infer<typeof UnansweredPart>;

/** The block's JSON: unknown keys are ignored, entries that are not `{part, reason}` are dropped. */
const UnansweredBlock = z.object({ unanswered: z.array(z.unknown()) });

/** The answer text without its unanswered block, and the block's list. */
export interface AnswerWithGaps {
  /** The text with the last unanswered block removed (the text itself when it has none). */
  text: string;
  /** The parts listed, de-duplicated by `part`; null when the text has no readable block. */
  unanswered: UnansweredPart[] | null;
}

/**
 * Reads the LAST unanswered block of an answer (`UNANSWERED_FENCE` ... closing fence) and removes
 * it from the text. A block that is not closed or whose JSON cannot be read is left in the text
 * (it is shown as written, never silently dropped) and gives `unanswered: null`.
 */
export function splitUnanswered(answer: string): AnswerWithGaps {
  const at = answer.lastIndexOf(UNANSWERED_FENCE);
  if (at < 0) return { text: answer, unanswered: null };
  const bodyStart = at + UNANSWERED_FENCE.length;
  const end = answer.indexOf('```', bodyStart);
  if (end < 0) return { text: answer, unanswered: null };
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.slice(bodyStart, end));
  } catch {
    return { text: answer, unanswered: null };
  }
  const block = UnansweredBlock.safeParse(parsed);
  if (!block.success) return { text: answer, unanswered: null };
  const parts = block.data.unanswered.flatMap((u) => {
    const p = UnansweredPart.safeParse(u);
    return p.success ? [p.data] : [];
  });
  const unique = parts.filter((p, i) => parts.findIndex((q) => q.part === p.part) === i);
  return { text: answer.slice(0, at) + answer.slice(end + 3), unanswered: unique };
}

/** The unanswered parts of an answer ({@link splitUnanswered}), or null when it has no readable block. */
export function extractUnanswered(answer: string): UnansweredPart[] | null {
  return splitUnanswered(answer).unanswered;
}
