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

/** The median of `xs` (the mean of the two middle values for an even count), or NaN when empty. */
export function median(xs) {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * One W1 level's row from its repeats (`--repeat`): the median of each repeat's Runs/s, p50, p99
 * and CPU ms per Run (one quiet or loaded moment of the machine moves a median less than a single
 * run), failures and stalls summed, and `repeats` with each repeat's own figures for the spread.
 * @param {{c: number, runs: number, runsPerS: number, p50: number, p99: number, cpuMsPerRun: number, failures: number, stalls?: number, stalledIds: string[]}[]} rows one per repeat, at least one
 */
export function combineRepeats(rows) {
  const of = (k) => median(rows.map((r) => r[k]));
  return {
    c: rows[0].c,
    runs: rows[0].runs,
    runsPerS: of('runsPerS'),
    p50: of('p50'),
    p99: of('p99'),
    cpuMsPerRun: of('cpuMsPerRun'),
    failures: rows.reduce((s, r) => s + r.failures, 0),
    stalls: rows.every((r) => r.stalls !== undefined) ? rows.reduce((s, r) => s + r.stalls, 0) : undefined,
    stalledIds: rows.flatMap((r) => r.stalledIds ?? []),
    repeats: rows.map((r) => ({ runsPerS: r.runsPerS, p50: r.p50, cpuMsPerRun: r.cpuMsPerRun })),
  };
}
