// Small statistics and load-driving helpers for the bench.

/** The p-th percentile (nearest rank) of `xs`, or NaN when empty. */
export function pct(xs, p) {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/**
 * Runs `runs` calls of `one(i)` with at most `concurrency` in flight (a closed loop: a worker
 * starts its next Run when the previous one has settled).
 * @returns {{ latencies: number[], failures: number, errors: string[], wallMs: number, runsPerS: number }}
 */
export async function drive(concurrency, runs, one) {
  const latencies = [];
  const errors = [];
  let failures = 0;
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (next < runs) {
      const i = next++;
      const s = performance.now();
      try {
        await one(i);
        latencies.push(performance.now() - s);
      } catch (e) {
        failures++;
        if (errors.length < 3) errors.push(String(e?.message ?? e).slice(0, 300));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, runs) }, worker));
  const wallMs = performance.now() - t0;
  return { latencies, failures, errors, wallMs, runsPerS: latencies.length / (wallMs / 1000) };
}

/** A number with a fixed number of decimals, or "n/a". */
export function num(x, digits = 1) {
  return x === undefined || x === null || Number.isNaN(x) ? 'n/a' : x.toFixed(digits);
}

/** `x / base` as "1.23x", or "" when either is missing. */
export function ratio(x, base) {
  if (x === undefined || base === undefined || x === null || base === null || Number.isNaN(x) || Number.isNaN(base) || base === 0) return '';
  return `${(x / base).toFixed(2)}x`;
}
