/**
 * What a principal (a bearer token's `sub`, recorded as `run.admitted.principal`) may be: 1 to 200
 * characters of well-formed Unicode without C0 or C1 controls, DEL, or bidirectional overrides and
 * isolates. It is recorded in the log, keyed on, stored in PostgreSQL (which refuses a NUL) and
 * printed. One rule for the services that verify tokens (service-kit `Authenticator`) and for the
 * CLI that mints them (`runplane token`), so that no token is minted that the services refuse.
 */

/** Characters a principal may not hold: C0 and C1 controls, DEL, bidirectional overrides and isolates. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNFIT_IN_PRINCIPAL = /[\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]/;

/**
 * Why `sub` cannot be a principal, or null when it can.
 * @returns `'length'` (not a string of 1 to 200 characters) or `'characters'` (a control or
 *   bidirectional override character, or a lone surrogate).
 */
export function principalProblem(sub: unknown): 'length' | 'characters' | null {
  if (typeof sub !== 'string' || sub.length === 0 || sub.length > 200) return 'length';
  if (UNFIT_IN_PRINCIPAL.test(sub) || !sub.isWellFormed()) return 'characters';
  return null;
}
