/**
 * What a principal (a bearer token's `sub`, recorded as `run.admitted.principal`) may be: 1 to 200
 * UTF-16 code units (an emoji beyond the Basic Multilingual Plane counts 2) of well-formed Unicode without C0 or C1 controls, DEL, or bidirectional
 * overrides and isolates, showing something and without white space at either end (a trial's
 * zero-width `sub` cancelled a Run the timeline then credited to a blank name, and `"alice "`
 * printed as `alice`). It is recorded in the log, keyed on, stored in PostgreSQL (which refuses a NUL) and
 * printed. One rule for the services that verify tokens (service-kit `Authenticator`) and for the
 * CLI that mints them (`runplane token`), so that no token is minted that the services refuse.
 */

/** Characters a principal may not hold: C0 and C1 controls, DEL, bidirectional overrides and isolates. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNFIT_IN_PRINCIPAL = /[\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]/;

/**
 * Characters that show nothing on their own: whitespace, combining and enclosing marks, format
 * characters (zero-width space and joiners, the BOM, soft hyphen...), variation selectors (marks) and the
 * Hangul/Braille fillers that render blank.
 */
const INVISIBLE = /[\p{White_Space}\p{Mn}\p{Me}\p{Cf}\u115F\u1160\u3164\uFFA0\u2800]/gu;
/** True when `s` has at least one character that shows something (not only {@link INVISIBLE} ones). */
export const showsSomething = (s: string): boolean => s.replace(INVISIBLE, '').length > 0;

/**
 * Why `sub` cannot be a principal, or null when it can.
 * @returns `'length'` (not a string of 1 to 200 UTF-16 code units), `'characters'` (a control or
 *   bidirectional override character, or a lone surrogate) or `'blank'` (only invisible
 *   characters, an invisible format character anywhere, or white space at its start or end).
 */
export function principalProblem(sub: unknown): 'length' | 'characters' | 'blank' | null {
  // UTF-16 code units, as `run.admitted.principal`'s schema counts them (an emoji beyond the BMP is 2)
  if (typeof sub !== 'string' || sub.length === 0 || sub.length > 200) return 'length';
  if (UNFIT_IN_PRINCIPAL.test(sub) || !sub.isWellFormed()) return 'characters';
  // a format character (zero-width space or joiner, soft hyphen, BOM...) shows nothing: `alice` and
  // `alice\u200b` would be two principals printed alike (a verification trial's)
  if (!showsSomething(sub) || sub.trim() !== sub || /\p{Cf}/u.test(sub)) return 'blank';
  return null;
}
