// The bench's command-line values, checked before anything starts (scripts/bench.js).

import { z } from 'zod';

/** What `--only` may name. */
export const BENCH_MODES = ['w1', 'demo', 'read-cost', 'soak', 'parked', 'audit'];
/** What `--systems` may name. */
export const BENCH_SYSTEMS = ['runplane', 'runplane-x3', 'dbos', 'restate'];

/** A whole decimal number of at least `min`, from its text. */
const whole = (min) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`));
/** A number greater than 0, from its text. */
const positive = z
  .string()
  .trim()
  .regex(/^\d+(\.\d+)?$/, 'must be a number')
  .transform(Number)
  .pipe(z.number().positive('must be more than 0'));
/** A comma-separated list of at least one item, each checked by `item`. */
const listOf = (item) =>
  z
    .string()
    .transform((s) =>
      s
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean),
    )
    .pipe(z.array(item).min(1, 'must name at least one'));
const oneOf = (names) =>
  z.string().refine((s) => names.includes(s.toLowerCase()), { error: (i) => `${String(i.input)} is not one of ${names.join(', ')}` });

const BenchArgs = z
  .object({
    only: listOf(oneOf(BENCH_MODES)),
    systems: listOf(oneOf(BENCH_SYSTEMS)),
    concurrency: listOf(whole(1)),
    runs: listOf(whole(1)),
    warmup: whole(0),
    repeat: whole(1),
    'demo-runs': whole(1),
    'demo-concurrency': whole(1),
    'read-others': listOf(whole(0)),
    reads: whole(1),
    'read-cap-s': whole(1),
    'raw-appends': whole(1),
    minutes: positive,
    rate: positive,
    parked: whole(1),
    'parked-concurrency': whole(1),
    'parked-cap-s': whole(1),
    'parked-idle-s': whole(0),
    'audit-runs': whole(1),
  })
  .loose()
  .superRefine((v, ctx) => {
    if (v.runs.length !== v.concurrency.length)
      ctx.addIssue({
        code: 'custom',
        path: ['runs'],
        message: `needs one count per --concurrency level (${v.concurrency.length}), got ${v.runs.length}`,
      });
  });

/**
 * What is wrong with the bench's option values (as `node:util` `parseArgs` returns them: text),
 * one line per problem, each naming its option: `--runs: must be at least 1`. Empty when every
 * value can be used. Pure.
 * @param {Record<string, string | boolean | undefined>} values
 * @returns {string[]}
 */
export function benchArgProblems(values) {
  const r = BenchArgs.safeParse(values);
  if (r.success) return [];
  return r.error.issues.map(
    (i) => `--${String(i.path[0] ?? '?')}: ${i.message}${i.path.length > 1 && typeof i.path[1] === 'number' ? ` (item ${i.path[1] + 1})` : ''}`,
  );
}
