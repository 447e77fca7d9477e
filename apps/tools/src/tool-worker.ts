/**
 * The activity, in a worker thread (piscina): runs one tool call and returns how it ended. Tool
 * work (parsing a large issuer file, a CPU-bound test tool) blocks only this thread, so the tools
 * worker's event loop stays free to enforce timeouts and renew claims (K5). Each thread keeps its
 * own holdings library, whose parsed files are cached by content digest, and, when
 * `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR` is set, kept on disk for the other threads and processes
 * (holdings `InspectionStore`).
 */
import { existsSync } from 'node:fs';
import { appendFile } from 'node:fs/promises';
// the tool packs alone: the rest of the contracts (events, configuration, HTTP) is not needed on a tool thread
import { RecordEffectArgs, TestToolPack } from '@runplane/contracts/tools';
import { executeTool, HoldingsLibrary, resolveDataFolder, ToolFailure } from '@runplane/holdings';
import { holdingsCodeVersion, InspectionStore } from '@runplane/holdings/inspection-store';
import type { ToolOutcome } from './decide.js';
import { tryBegin, type StartGate } from './start-gate.js';
import { releaseStartupMemory } from '@runplane/kit/memory';

/** One call to run: the tool, its raw arguments (JSON text), and who asked (recorded by test tools). */
import type { MessagePort } from 'node:worker_threads';

export interface ToolTask {
  name: string;
  argumentsText: string;
  runId: string;
  toolCallId: string;
  /** Test tools this worker may run (`RUNPLANE_TEST_TOOLS`). */
  testTools: string[];
  /** File `record_effect` appends to. */
  recordEffectFile: string;
  /** The holdings folder (`RUNPLANE_DATA_DIR`; empty: the default folder, holdings `resolveDataFolder`). */
  dataDir: string;
  /** Where inspections of the data files are kept for other threads and processes (`RUNPLANE_TOOLS_INSPECTION_CACHE_DIR`; empty or absent: nowhere). */
  inspectionCacheDir?: string;
  /** Told `started` the moment this thread begins the call (the timeout counts from then, not from the queue). */
  startedPort?: MessagePort;
  /** Passed only when the call may be refused while it waits for a thread: begun only if it was not. */
  startGate?: StartGate;
}

let library: HoldingsLibrary | null = null;

/**
 * Says on stderr, as a warning line in the service's log format, why this thread keeps no
 * inspections on disk (the thread has no logger of its own).
 */
function storeRefused(reason: string): void {
  process.stderr.write(
    `${JSON.stringify({ level: 40, time: Date.now(), service: 'tools', context: 'tool-thread', msg: `parsing the data files itself: ${reason}` })}\n`,
  );
}

// the version of the parsing code this thread loaded, taken now: a build that replaces the files
// before this thread's first call cannot lend its version to this code (holdings InspectionStore)
holdingsCodeVersion();

/** Busy-waits `ms` milliseconds: blocks the thread, as a CPU-bound parse does. */
function burn(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    /* burning */
  }
}

/** Waits until `path` exists, checked every 50 ms, for at most `ms` milliseconds. */
async function waitForFile(path: string, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && !existsSync(path)) await new Promise((r) => setTimeout(r, Math.min(50, until - Date.now())));
}

async function recordEffect(task: ToolTask, rawArgs: unknown): Promise<unknown> {
  const parsed = RecordEffectArgs.safeParse(rawArgs ?? {});
  if (!parsed.success) throw new ToolFailure('bad_arguments', `Bad arguments for record_effect: ${parsed.error.message}`);
  const args = parsed.data;
  if (!task.recordEffectFile) throw new Error('record_effect has no RUNPLANE_RECORD_EFFECT_FILE to record in');
  const line = `${task.runId} ${task.toolCallId} ${args.tag}`;
  await appendFile(task.recordEffectFile, `${line}\n`);
  if (args.burnMs) burn(args.burnMs);
  if (args.sleepMs) await (args.untilFile ? waitForFile(args.untilFile, args.sleepMs) : new Promise((r) => setTimeout(r, args.sleepMs)));
  if (args.hang) await new Promise(() => undefined);
  if (args.fail) return Promise.reject(Object.assign(new Error('record_effect was told to fail'), { code: 'injected_failure' }));
  return TestToolPack.record_effect.result.parse({ recorded: line });
}

/** What a thread's warm-up is told: whether to run its start-up collection (its process's `RUNPLANE_STARTUP_COLLECTION`; a warm-up told nothing, `null`, collects). */
export interface WarmUp {
  startupCollection: boolean;
}

/**
 * Run once on each thread at start-up, it resolves when the thread has loaded this module
 * (ToolExecutor.ready); it returns what loading left behind to the OS (kit `releaseStartupMemory`)
 * unless the process was started with `RUNPLANE_STARTUP_COLLECTION=false`.
 * @returns whether the collection ran.
 */
export function warmUp(task: WarmUp | null): boolean {
  return releaseStartupMemory(task?.startupCollection ?? true);
}

/** Runs `task`; never throws: every ending is an outcome. */
export default async function runTool(task: ToolTask): Promise<Exclude<ToolOutcome, { kind: 'timed-out' }>> {
  if (task.startGate && !tryBegin(task.startGate)) {
    task.startedPort?.close();
    return { kind: 'failed', code: 'not_started', message: 'refused while it waited for a thread; it was not executed' };
  }
  task.startedPort?.postMessage('started');
  task.startedPort?.close();
  try {
    const args: unknown = task.argumentsText.trim() === '' ? {} : JSON.parse(task.argumentsText);
    let result: unknown;
    if (task.name in TestToolPack) {
      if (!task.testTools.includes(task.name)) throw new ToolFailure('unknown_tool', `Tool ${task.name} is not enabled on this worker.`);
      result = await recordEffect(task, args);
    } else {
      // a store refused here (the folder changed since start-up checked it, or the code on disk
      // since this thread loaded it) is off: this thread parses, and says why once
      library ??= new HoldingsLibrary(
        resolveDataFolder({ RUNPLANE_DATA_DIR: task.dataDir }),
        InspectionStore.open(task.inspectionCacheDir ?? '', undefined, storeRefused),
      );
      result = await executeTool(library, task.name, args);
    }
    return { kind: 'returned', json: JSON.stringify(result) };
  } catch (e) {
    if (e instanceof ToolFailure) return { kind: 'failed', code: e.code, message: e.message };
    const code = (e as { code?: unknown }).code;
    if (code === 'injected_failure') return { kind: 'failed', code, message: (e as Error).message };
    return { kind: 'crashed', message: e instanceof Error ? e.message : String(e) };
  }
}
