// Types of the bench's argument check a test imports (scripts/bench/args.js is plain JavaScript).

export const BENCH_MODES: string[];
export const BENCH_SYSTEMS: string[];
export function benchArgProblems(values: Record<string, string | boolean | undefined>): string[];
