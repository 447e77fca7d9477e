/**
 * The production image (deploy/Dockerfile, target `production`) deletes the scripted model, the
 * devstack and PGlite after the build. What it still runs must not load them: every service's
 * Nest module (all it imports at start), the CLI's program and its commands for the runbook
 * (`timeline`, `audit`, `projections rebuild`) and the provisioning entry. Checked without building the image: one Node
 * process imports those modules from this checkout's build with a module hook that refuses every
 * path the Dockerfile deletes (read from its `production-files` stage), so a new static import of
 * any of them fails here. Needs `npm run build` first (as every test of the built apps).
 */
import { describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { repoRoot } from '@runplane/devstack';

const repo = repoRoot();

/** The paths the production stage removes (its `RUN rm -rf ...`), relative to /app = the repository root. */
function removedByProductionStage(dockerfile: string): string[] {
  const stage = /FROM build AS production-files\n([\s\S]*?)\n\n/.exec(dockerfile)?.[1] ?? '';
  const rm = /RUN rm -rf ([\s\S]*)/.exec(stage)?.[1] ?? '';
  return rm
    .replace(/\\\n/g, ' ')
    .split(/\s+/)
    .filter((p) => p && !p.startsWith('#'));
}

/** Runs `node` importing `modules` with a hook refusing anything under `blocked`; resolves to its exit code and output. */
async function importWithout(blocked: string[], modules: string[]): Promise<{ code: number; out: string; killed: boolean }> {
  const dir = mkdtempSync(join(tmpdir(), 'rp-prod-image-'));
  try {
    const prefixes = blocked.map((p) => pathToFileURL(join(repo, p)).href);
    writeFileSync(
      join(dir, 'hooks.mjs'),
      `const blocked = ${JSON.stringify(prefixes)};
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  if (blocked.some((b) => r.url === b || r.url.startsWith(b + '/'))) throw new Error('REFUSED ' + specifier + ' (' + r.url + ')');
  return r;
}
`,
    );
    writeFileSync(
      join(dir, 'register.mjs'),
      `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)});\n`,
    );
    const script = `for (const m of ${JSON.stringify(modules.map((m) => pathToFileURL(join(repo, m)).href))}) await import(m); console.log('LOADED');`;
    try {
      const { stdout, stderr } = await promisify(execFile)(
        process.execPath,
        ['--import', join(dir, 'register.mjs'), '--input-type=module', '-e', script],
        {
          cwd: repo,
          // about 3 s on a quiet machine; beside the suite's other worker (an e2e stack) in CI it
          // once ran past 60 s: the bound is only there so that a hang fails instead of stalling
          timeout: 150_000,
        },
      );
      return { code: 0, out: stdout + stderr, killed: false };
    } catch (e) {
      const err = e as { code?: number; killed?: boolean; stdout?: string; stderr?: string };
      return {
        code: typeof err.code === 'number' ? err.code : 1,
        out: `${err.stdout ?? ''}${err.stderr ?? ''}`,
        killed: err.killed === true,
      };
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const blocked = removedByProductionStage(readFileSync(join(repo, 'deploy', 'Dockerfile'), 'utf8'));

describe('the production image', () => {
  it('removes the scripted model, the devstack and PGlite', () => {
    expect(blocked).toEqual(
      expect.arrayContaining([
        'apps/scripted-model',
        'libs/devstack',
        'node_modules/@runplane/devstack',
        'node_modules/@electric-sql',
        'node_modules/@mikro-orm/pglite',
      ]),
    );
  });

  it('still loads every service module, the runbook CLI commands and the provisioning entry without them', async () => {
    const modules = [
      'apps/admission/dist/admission.module.js',
      'apps/publication/dist/publication.module.js',
      'apps/runtime/dist/runtime.module.js',
      'apps/tools/dist/tools.module.js',
      'apps/lifecycle/dist/lifecycle.module.js',
      'apps/recovery/dist/recovery.module.js',
      'apps/projector/dist/app.module.js',
      'apps/cli/dist/program.js',
      'apps/cli/dist/commands.js',
      'apps/cli/dist/provision.js',
    ];
    const { code, out, killed } = await importWithout(blocked, modules);
    expect(out).not.toMatch(/REFUSED/);
    // on failure the child's output (its error) and whether it was killed at the bound are shown
    expect({ code, killed, loaded: out.includes('LOADED'), out: code === 0 ? '' : out.slice(-3000) }).toEqual({
      code: 0,
      killed: false,
      loaded: true,
      out: '',
    });
  }, 180_000);

  it('the check can fail: the devstack and the scripted model are refused under the same hook', async () => {
    for (const m of ['libs/devstack/dist/index.js', 'apps/scripted-model/dist/server.js']) {
      const { code, out } = await importWithout(blocked, [m]);
      expect(code).not.toBe(0);
      expect(out).toMatch(/REFUSED/);
    }
  }, 180_000);
});
