/**
 * Every configurable limit at the edges of what start-up accepts (docs/configuration.md,
 * docs/operations.md): the smallest and largest value accepted, one beyond each refused with the
 * variable named; and the final-output reserve, kept OUT OF the Run's limits, leaves research at
 * least one model request and one output token, or start-up refuses it (a reserve that takes
 * the whole budget made every Run stop before its first model request).
 */
import { describe, expect, it } from '@jest/globals';
import { z } from 'zod';
import {
  BusConfig,
  ContextConfig,
  DrainConfig,
  LeaseConfig,
  LimitsConfig,
  loadConfig,
  MAX_TIMER_MS,
  ModelConfig,
  ObserverConfig,
  QuotaConfig,
  RecoveryConfig,
  ShutdownConfig,
  ToolsConfig,
  WaitConfig,
} from '@runplane/contracts';

const YEAR_S = 366 * 24 * 3600;
const cases: [string, z.ZodObject, number, number | null][] = [
  ['RUNPLANE_MAX_MODEL_REQUESTS', LimitsConfig, 2, null],
  ['RUNPLANE_MAX_TOOL_CALLS', LimitsConfig, 0, null],
  ['RUNPLANE_RUN_DEADLINE_SECONDS', LimitsConfig, 1, YEAR_S],
  ['RUNPLANE_MAX_INPUT_TOKENS', LimitsConfig, 1, null],
  ['RUNPLANE_MAX_OUTPUT_TOKENS', LimitsConfig, 4_001, null],
  ['RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS', LimitsConfig, 0, 7],
  ['RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS', LimitsConfig, 0, 63_999],
  ['RUNPLANE_NO_PROGRESS_SECONDS', LimitsConfig, 1, YEAR_S],
  ['RUNPLANE_WAIT_TTL_SECONDS', WaitConfig, 1, YEAR_S],
  ['RUNPLANE_LEASE_TTL_MS', LeaseConfig, 300, MAX_TIMER_MS],
  ['RUNPLANE_DRAIN_SECONDS', DrainConfig, 0, 3_600],
  ['RUNPLANE_SHUTDOWN_GRACE_SECONDS', ShutdownConfig, 1, 3_600],
  ['RUNPLANE_ACK_WAIT_MS', BusConfig, 500, MAX_TIMER_MS],
  ['RUNPLANE_MODEL_TIMEOUT_MS', ModelConfig, 1, MAX_TIMER_MS],
  ['RUNPLANE_MODEL_MAX_TOKENS', ModelConfig, 1, null],
  ['RUNPLANE_MODEL_MAX_CONCURRENT', ModelConfig, 1, 10_000],
  ['RUNPLANE_MODEL_MIN_INTERVAL_MS', ModelConfig, 0, MAX_TIMER_MS],
  ['RUNPLANE_FINALIZATION_LEAD_SECONDS', ModelConfig, 0, YEAR_S],
  ['RUNPLANE_TOOL_TIMEOUT_MS', ToolsConfig, 1, MAX_TIMER_MS],
  ['RUNPLANE_TOOL_CLAIM_TTL_MS', ToolsConfig, 100, MAX_TIMER_MS],
  ['RUNPLANE_TOOL_CLAIM_SWEEP_MS', ToolsConfig, 50, MAX_TIMER_MS],
  ['RUNPLANE_TOOL_THREADS', ToolsConfig, 1, 64],
  ['RUNPLANE_RECOVERY_SWEEP_MS', RecoveryConfig, 50, MAX_TIMER_MS],
  ['RUNPLANE_CONTEXT_MAX_CHARS', ContextConfig, 2_000, 50_000_000],
  ['RUNPLANE_QUOTA_CONCURRENT_RUNS', QuotaConfig, 1, 1_000_000],
  ['RUNPLANE_QUOTA_RUNS_PER_HOUR', QuotaConfig, 1, 1_000_000],
  ['RUNPLANE_QUOTA_COST_MICROS_PER_DAY', QuotaConfig, 1, 1_000_000_000_000_000],
  ['RUNPLANE_OBSERVER_STREAMS_MAX', ObserverConfig, 1, 100_000],
  ['RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL', ObserverConfig, 1, 100_000],
];

describe('configured limits: accepted at their edges, refused one beyond, naming the variable', () => {
  it.each(cases)('%s', (name, schema, min, max) => {
    const at = (v: number) => loadConfig(schema, { [name]: String(v) })[name];
    expect(at(min)).toBe(min);
    expect(at(min + 1)).toBe(min + 1);
    if (min > 0) expect(() => at(min - 1)).toThrow(new RegExp(`Invalid configuration: .*${name}`));
    else expect(() => at(-1)).toThrow(new RegExp(`Invalid configuration: .*${name}`));
    if (max !== null) {
      expect(at(max)).toBe(max);
      expect(() => at(max + 1)).toThrow(new RegExp(`Invalid configuration: .*${name}`));
    }
  });
});

describe('the final-output reserve is kept out of the limits, never all of them', () => {
  const limits = (env: Record<string, string>) => loadConfig(LimitsConfig, env);
  it('model requests: a reserve of max-1 is accepted; max and max+1 are refused naming the reserve', () => {
    expect(limits({ RUNPLANE_MAX_MODEL_REQUESTS: '4', RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: '3' }).RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS).toBe(3);
    for (const reserve of ['4', '5']) {
      expect(() => limits({ RUNPLANE_MAX_MODEL_REQUESTS: '4', RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: reserve })).toThrow(
        /Invalid configuration: RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: .*less than RUNPLANE_MAX_MODEL_REQUESTS/,
      );
    }
  });
  it('output tokens: a reserve of max-1 is accepted; max and max+1 are refused naming the reserve', () => {
    expect(limits({ RUNPLANE_MAX_OUTPUT_TOKENS: '1000', RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS: '999' }).RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS).toBe(
      999,
    );
    for (const reserve of ['1000', '1001']) {
      expect(() => limits({ RUNPLANE_MAX_OUTPUT_TOKENS: '1000', RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS: reserve })).toThrow(
        /Invalid configuration: RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS: .*less than RUNPLANE_MAX_OUTPUT_TOKENS/,
      );
    }
  });
  it('the defaults (8 requests, 1 kept; 64000 tokens, 4000 kept) are accepted', () => {
    expect(limits({})).toMatchObject({ RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: 1, RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS: 4_000 });
  });
});
