// Types of the bench helpers a test imports (scripts/bench/stats.js is plain JavaScript).

/** One W1 level's figures, as the bench measures them (one run, or the median of `--repeat` runs). */
export interface LevelRow {
  c: number;
  runs: number;
  runsPerS: number;
  p50: number;
  p99: number;
  cpuMsPerRun: number;
  failures: number;
  stalls?: number;
  stalledIds: string[];
  repeats?: { runsPerS: number; p50: number; cpuMsPerRun: number }[];
}

export function pct(xs: number[], p: number): number;
export function median(xs: number[]): number;
export function combineRepeats(rows: LevelRow[]): LevelRow & { repeats: NonNullable<LevelRow['repeats']> };
export function num(x: number | null | undefined, digits?: number): string;
export function ratio(x: number | null | undefined, base: number | null | undefined): string;
export function drive(
  concurrency: number,
  runs: number,
  one: (i: number) => Promise<unknown>,
): Promise<{ latencies: number[]; failures: number; errors: string[]; wallMs: number; runsPerS: number }>;
