/**
 * The suite's Jest test environment: Node's, with V8's code cache kept across the test files a Jest
 * worker runs.
 *
 * Why: Jest gives every test file a fresh module registry, so a worker compiles the same modules
 * (Nest, the NATS client, zod, the workspace libraries) again for each of its files. A profile of
 * the projects' tests (`npm run test:unit` in band, `--cpu-prof`) spent about 19 of its 94 CPU
 * seconds in V8 compiling them: `new SourceTextModule` (ES modules, 10.4 s) and `compileFunction`
 * (CommonJS, 8.4 s). Both take a `cachedData` that V8 checks against the source and uses instead of
 * parsing it again, or rejects (then the module compiles as before: a cache can cost time, never
 * correctness).
 *
 * How: Jest builds both through the `node:vm` module object (`_nodeVm().SourceTextModule`,
 * `_nodeVm().compileFunction`, looked up at every call), so this environment, loaded once per worker
 * outside the tests' contexts, replaces those two exports with wrappers that pass the cached data of
 * an identical source, or make it on first sight. The cache lives in the worker's memory, keyed by
 * the module's file and checked against its whole source text; nothing is written to disk.
 * `RUNPLANE_TEST_CODE_CACHE=0` turns it off; it is off under a Node older than 24.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { relative } from 'node:path';
import vm from 'node:vm';
import { TestEnvironment } from 'jest-environment-node';

const PATCHED = Symbol.for('runplane.test.codeCache');

/**
 * Node 24 or later (what the npm scripts run on): under Node 20 a module compiled from a cache loses
 * its dynamic `import()` callback ("A dynamic import callback was not specified", seen when Jest was
 * started with the machine's Node 20), so there the environment does nothing.
 */
const SUPPORTED_NODE = Number(process.versions.node.split('.')[0]) >= 24;

/** `{ source, data }` by file (or identifier) and kind, for the modules this worker compiled. */
const cache = new Map();

/**
 * The cached data for `key` when its source is `source` exactly, else undefined (V8's own check of a
 * cache against its source compares little more than the length, so the text is compared here).
 */
function cachedFor(key, source) {
  const hit = cache.get(key);
  return hit && hit.source === source ? hit.data : undefined;
}

/** Replaces `vm.SourceTextModule` and `vm.compileFunction` with their caching wrappers, once per worker. */
function patchVm() {
  if (vm[PATCHED] || process.env.RUNPLANE_TEST_CODE_CACHE === '0' || !SUPPORTED_NODE) return;
  const { SourceTextModule, compileFunction } = vm;
  if (typeof SourceTextModule === 'function') {
    /** `new vm.SourceTextModule(source, options)`, with the cached data of an identical source. */
    const CachedSourceTextModule = function (source, options = {}) {
      const key = `esm:${options.identifier ?? ''}`;
      const cachedData = options.identifier && options.cachedData === undefined ? cachedFor(key, source) : undefined;
      let module = null;
      if (cachedData) {
        // V8 refuses a cache made under other flags (a test that called `v8.setFlagsFromString`,
        // say), and Node then throws: the module compiles from its source, and its cache is made again
        try {
          module = Reflect.construct(SourceTextModule, [source, { ...options, cachedData }]);
        } catch {
          module = null;
        }
      }
      if (module) return module;
      module = Reflect.construct(SourceTextModule, [source, options]);
      if (options.identifier) {
        try {
          cache.set(key, { source, data: module.createCachedData() });
        } catch {
          // no cache for this one: it compiles each time, as without this environment
        }
      }
      return module;
    };
    // `instanceof vm.SourceTextModule` and its statics hold for what it makes
    CachedSourceTextModule.prototype = SourceTextModule.prototype;
    Object.setPrototypeOf(CachedSourceTextModule, SourceTextModule);
    vm.SourceTextModule = CachedSourceTextModule;
  }
  vm.compileFunction = function cachedCompileFunction(code, params, options = {}) {
    const key = `cjs:${options.filename ?? ''}:${(params ?? []).join(',')}`;
    if (!options.filename || options.cachedData !== undefined || options.produceCachedData) return compileFunction(code, params, options);
    const cachedData = cachedFor(key, code);
    const fn = compileFunction(code, params, cachedData ? { ...options, cachedData } : { ...options, produceCachedData: true });
    // a rejected cache (made under other V8 flags) is dropped: the next compile makes a new one
    if (fn.cachedDataRejected) cache.delete(key);
    else if (!cachedData && fn.cachedData) cache.set(key, { source: code, data: fn.cachedData });
    return fn;
  };
  vm[PATCHED] = true;
}

patchVm();

/**
 * This process's CPU so far from `/proc/self/stat`, ms: its own (`utime + stime`) and that of the
 * children it has reaped (`cutime + cstime`); null where there is no `/proc`.
 */
function processCpuMs() {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    // the fields after the command name, which is in parentheses and may hold spaces
    const f = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    const tickMs = 1000 / CLOCK_TICKS_PER_S;
    return { own: (f[11] + f[12]) * tickMs, children: (f[13] + f[14]) * tickMs };
  } catch {
    return null;
  }
}

/** Linux's `USER_HZ`, what `/proc/<pid>/stat` counts CPU time in (100 on every Linux this runs on). */
const CLOCK_TICKS_PER_S = 100;

/**
 * With `RUNPLANE_TEST_CPU_FILE` set, each test file appends one JSON line to that file once it is
 * done: `{ file, ownMs, childrenMs, wallMs }`, the Jest worker's CPU from the file's set-up to its
 * tear-down, the CPU of the child processes it reaped meanwhile (the services, nats-servers and CLI
 * runs the file started and waited for), and its wall time; `scripts/test-cpu.js` sums them up.
 * What a file costs the machine, where `test-costs.json` holds what it took on the clock.
 */
class RunplaneTestEnvironment extends TestEnvironment {
  constructor(config, context) {
    super(config, context);
    this.cpuFile = process.env.RUNPLANE_TEST_CPU_FILE || null;
    this.testPath = context.testPath;
  }

  async setup() {
    if (this.cpuFile) this.cpuAtSetup = { cpu: processCpuMs(), at: Date.now() };
    await super.setup();
  }

  async teardown() {
    await super.teardown();
    const start = this.cpuAtSetup;
    const end = this.cpuFile ? processCpuMs() : null;
    if (!start?.cpu || !end) return;
    const line = {
      file: relative(process.cwd(), this.testPath),
      ownMs: Math.round(end.own - start.cpu.own),
      childrenMs: Math.round(end.children - start.cpu.children),
      wallMs: Date.now() - start.at,
    };
    appendFileSync(this.cpuFile, `${JSON.stringify(line)}\n`);
  }
}

export default RunplaneTestEnvironment;
