/**
 * The tools' holdings folder is a setting (`RUNPLANE_DATA_DIR` in contracts `ToolsConfig`),
 * injected into the tools worker and handed to each tool call: the tool threads read the folder
 * the settings name, never `process.env` of their own.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DrainConfig, ToolsConfig } from '@runplane/contracts';
import { SAMPLE_DIR } from '@runplane/holdings';
import { checkedToolsSettings, toolsSettings } from '../dist/dispatch.controller.js';
import { ToolExecutor } from '../dist/executor.js';

describe('tools: the holdings folder is a setting', () => {
  it('given RUNPLANE_DATA_DIR, then the settings carry it; unset, then empty (the default folder)', () => {
    expect(toolsSettings(ToolsConfig.parse({ RUNPLANE_DATA_DIR: '/data/holdings' }), DrainConfig.parse({})).dataDir).toBe('/data/holdings');
    expect(toolsSettings(ToolsConfig.parse({}), DrainConfig.parse({})).dataDir).toBe('');
  });

  it('given RUNPLANE_DATA_DIR that is not a directory, then the settings refuse it at start-up, naming the setting; a folder passes', () => {
    expect(() => checkedToolsSettings(ToolsConfig.parse({ RUNPLANE_DATA_DIR: '/no/such/holdings' }), DrainConfig.parse({}))).toThrow(
      'RUNPLANE_DATA_DIR=/no/such/holdings is not a directory.',
    );
    expect(checkedToolsSettings(ToolsConfig.parse({ RUNPLANE_DATA_DIR: SAMPLE_DIR }), DrainConfig.parse({})).dataDir).toBe(SAMPLE_DIR);
  });

  describe('given a folder in the settings and another in the process environment', () => {
    let dir: string;
    let executor: ToolExecutor;
    const saved = process.env['RUNPLANE_DATA_DIR'];
    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'rp-data-dir-'));
      copyFileSync(join(SAMPLE_DIR, 'ILLUSTRATIVE-AAA_2025-01-31.csv'), join(dir, 'ILLUSTRATIVE-AAA_2025-01-31.csv'));
      // the tool threads inherit this environment: they must not read it
      process.env['RUNPLANE_DATA_DIR'] = SAMPLE_DIR;
      executor = new ToolExecutor({ threads: 1, timeoutMs: 30_000, abandonMs: 0 });
      await executor.ready;
    });
    afterAll(async () => {
      await executor?.close();
      if (saved === undefined) delete process.env['RUNPLANE_DATA_DIR'];
      else process.env['RUNPLANE_DATA_DIR'] = saved;
      rmSync(dir, { recursive: true, force: true });
    });

    it('when list_funds runs, then it lists the settings folder only', async () => {
      const settings = toolsSettings(ToolsConfig.parse({ RUNPLANE_DATA_DIR: dir }), DrainConfig.parse({}));
      const { outcome } = await executor.run({
        name: 'list_funds',
        argumentsText: '{}',
        runId: 'r1',
        toolCallId: 't1',
        testTools: settings.testTools,
        recordEffectFile: settings.recordEffectFile,
        dataDir: settings.dataDir!,
      });
      expect(outcome.kind).toBe('returned');
      const result = JSON.parse((outcome as { json: string }).json) as { funds: { fund: string }[] };
      expect(result.funds.map((f) => f.fund)).toEqual(['AAA']);
    });
  });
});
