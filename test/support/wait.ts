/**
 * Waiting on the signal a test is about, not on a fixed sleep: polls `probe` every `everyMs`
 * (default 25 ms) until it returns something truthy, and returns that.
 * @throws Error `timed out after <ms> ms waiting for <what>` when `timeoutMs` (default 20 s) passes first.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 20_000,
  everyMs = 25,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
