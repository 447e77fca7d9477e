import type { ToolsSettings } from '../dist/dispatch.controller.js';

/**
 * The settings of a tools worker in a test that runs the `record_effect` test tool (each
 * execution appends a line to `effectFile`): one tool thread, a 6 s claim, no sweep or abandon
 * during the test.
 */
export const recordingWorkerSettings = (effectFile: string): ToolsSettings => ({
  timeoutMs: 20_000,
  claimTtlMs: 6_000,
  sweepMs: 60_000,
  abandonMs: 0,
  threads: 1,
  testTools: ['record_effect'],
  recordEffectFile: effectFile,
});
