/**
 * What the scripted research cannot give, listed as not answered rather than passed over (K9: an
 * answer never claims more than was read). Pure: from the question's words and the funds read.
 */
import type { UnansweredPart } from '@runplane/contracts';
import { ADVICE_WORDS, asksOutsideTheData, OUTSIDE_THE_DATA_WORDS, questionParts, SECTOR_WORDS, SMALLEST_WORDS } from './question.js';

/**
 * The parts of `question` the research cannot answer, each with a short reason:
 * - the smallest holdings of each fund read (the holdings tool returns the largest by weight; a
 *   trial's "5 smallest holdings of DIA" was answered with its largest, as complete);
 * - a sector breakdown (the tool returns no sectors);
 * - a recommendation (the research gives no advice);
 * - a part of the question, or a piece of it between commas, asking for what holdings files do not
 *   hold or for nothing the data holds (`... and who manages it`, `its return last year`).
 * @param fundsRead the funds whose holdings were read, without repeats (empty when none were).
 * @param covered the funds of the question the data covers (named when none was read).
 * @param knownFunds the data's funds, or the question's when the list of funds is not known.
 */
export function beyondTheResearch(
  question: string,
  fundsRead: readonly string[],
  covered: readonly string[],
  knownFunds: Iterable<string>,
): UnansweredPart[] {
  const out: UnansweredPart[] = [];
  if (SMALLEST_WORDS.test(question))
    for (const fund of fundsRead) out.push({ part: `the smallest holdings of ${fund}`, reason: 'only the largest holdings by weight are read' });
  const which = (fundsRead.length > 0 ? fundsRead : covered).join(' and ');
  if (SECTOR_WORDS.test(question)) out.push({ part: `the sector breakdown of ${which}`, reason: 'the holdings tool returns no sectors' });
  if (ADVICE_WORDS.test(question)) out.push({ part: 'a recommendation', reason: 'the research reads holdings files; it gives no advice' });
  const known = [...knownFunds];
  for (const part of questionParts(question)) {
    // within a part, the pieces between commas that ask for what the files do not hold
    // (`Top 5 holdings of ARKK, its return last year`: `its return last year`)
    const pieces = part
      .split(/,\s*(?:and\s+)?/)
      .map((p) => p.trim())
      .filter((p) => p.length > 0 && OUTSIDE_THE_DATA_WORDS.test(p) && !ADVICE_WORDS.test(p));
    for (const piece of pieces.length > 0 || !asksOutsideTheData(part, known) ? pieces : [part])
      out.push({ part: `"${piece}"`, reason: 'nothing in the data answers it' });
  }
  return out;
}
