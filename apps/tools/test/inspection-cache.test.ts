/**
 * The tool threads share their data-file inspections through `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR`
 * (holdings `InspectionStore`): a fresh thread (another tools process's, here another executor's)
 * answers from what the first one kept instead of parsing the folder again, and start-up refuses a
 * folder that another user may write, since whoever writes it decides what the tools answer.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { chmodSync, copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DrainConfig, ToolsConfig } from '@runplane/contracts';
import { InspectionStore, SAMPLE_DIR, sha256Of, type Inspection } from '@runplane/holdings';
import { checkedToolsSettings, toolsSettings } from '../dist/dispatch.controller.js';
import { ToolExecutor } from '../dist/executor.js';

const made: string[] = [];
const temp = (label: string) => {
  const dir = mkdtempSync(join(tmpdir(), `rp-tools-inspections-${label}-`));
  made.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

describe('tools: RUNPLANE_TOOLS_INSPECTION_CACHE_DIR at start-up', () => {
  it('given the setting, then the settings carry it; unset, then empty (each thread parses for itself)', () => {
    expect(toolsSettings(ToolsConfig.parse({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '/var/cache/x' }), DrainConfig.parse({})).inspectionCacheDir).toBe(
      '/var/cache/x',
    );
    expect(toolsSettings(ToolsConfig.parse({}), DrainConfig.parse({})).inspectionCacheDir).toBe('');
  });

  it('given a folder that does not exist, then start-up makes it with mode 0700', () => {
    const dir = join(temp('missing'), 'a', 'b');
    checkedToolsSettings(ToolsConfig.parse({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: dir }), DrainConfig.parse({}));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
  });

  it('given a folder others may write, then start-up refuses it, naming the setting and why', () => {
    const dir = temp('open');
    chmodSync(dir, 0o777);
    expect(() => checkedToolsSettings(ToolsConfig.parse({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: dir }), DrainConfig.parse({}))).toThrow(
      `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR=${dir} cannot be used: others may use it (mode 777; 700 is needed).`,
    );
  });
});

describe('tools: two tool threads with one inspection folder', () => {
  let data: string;
  let cache: string;
  const executors: ToolExecutor[] = [];
  const listFunds = async (executor: ToolExecutor) => {
    const { outcome } = await executor.run({
      name: 'list_funds',
      argumentsText: '{}',
      runId: 'r1',
      toolCallId: 't1',
      testTools: [],
      recordEffectFile: '',
      dataDir: data,
      inspectionCacheDir: cache,
    });
    if (outcome.kind !== 'returned') throw new Error(`list_funds did not return: ${JSON.stringify(outcome)}`);
    return JSON.parse(outcome.json) as { funds: { fund: string }[] };
  };
  beforeAll(async () => {
    data = temp('data');
    for (const name of readdirSync(SAMPLE_DIR)) copyFileSync(join(SAMPLE_DIR, name), join(data, name));
    cache = temp('cache');
    chmodSync(cache, 0o700);
    for (let i = 0; i < 2; i++) executors.push(new ToolExecutor({ threads: 1, timeoutMs: 30_000, abandonMs: 0 }));
    await Promise.all(executors.map((e) => e.ready));
  });
  afterAll(async () => {
    await Promise.all(executors.map((e) => e.close()));
  });

  it("when the first thread lists the funds, then it keeps every file's inspection; a fresh thread then answers from them, not from a parse", async () => {
    expect((await listFunds(executors[0]!)).funds.map((f) => f.fund)).toEqual(['AAA', 'BBB']);
    const versions = readdirSync(cache);
    expect(versions).toHaveLength(1);
    expect(readdirSync(join(cache, versions[0]!))).toHaveLength(readdirSync(data).length);
    // what the first thread kept for AAA's file, altered: only a thread that reads the folder's
    // entries (and does not parse the file) can answer with it
    const name = 'ILLUSTRATIVE-AAA_2025-01-31.csv';
    const path = join(data, name);
    const store = InspectionStore.open(cache, versions[0])!;
    const sha = sha256Of(readFileSync(path));
    const kept = store.get(sha, path, name) as Extract<Inspection, { kind: 'holdings' }>;
    expect(kept.parsed.fund).toBe('AAA');
    store.put(sha, path, name, { ...kept, parsed: { ...kept.parsed, fund: 'KEPT' } });
    expect((await listFunds(executors[1]!)).funds.map((f) => f.fund)).toEqual(['BBB', 'KEPT']);
  });
});
