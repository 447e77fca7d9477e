/**
 * The docs name only what exists (test/support/docs-check.ts): every `RUNPLANE_*` setting in
 * README.md, docs/ and the READMEs is read somewhere in the code, every `npm run X` is a script,
 * every `runplane <command> [--flag]` is a command and option of the CLI (its commander program,
 * apps/cli/src/program.ts), every relative link and anchor resolves, and
 * every repository path in backticks exists; no internal issue number is cited, in the docs or in
 * any source comment of apps, libs, scripts, deploy, test; every service's durable consumer named in
 * the docs or in deploy/ is `<prefix>-<service>-p<N>`, as the services make them. The README keeps to its two fresh-machine commands
 * (the demo and the tests, which .ci/run runs) and under 200 lines. Then the checker itself is
 * shown failing on planted names, so a pass means something.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { program } from '@runplane/app-cli';
import { repoRoot } from '@runplane/devstack';
import {
  bannerRedirects,
  cliCommandsOf,
  codeText,
  consumerNamingFiles,
  docsProblems,
  durableNameProblems,
  issueCitations,
  markdownFiles,
  sourceAndDocFiles,
  type DocsFacts,
} from '../support/docs-check.js';

const repo = repoRoot();
let facts: DocsFacts;

beforeAll(() => {
  const pkg = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  facts = { repo, code: codeText(repo), scripts: new Set(Object.keys(pkg.scripts)), cli: cliCommandsOf(program) };
});

describe('the docs name only what exists', () => {
  it('finds the CLI commands it checks against', () => {
    expect([...facts.cli.keys()]).toEqual(
      expect.arrayContaining(['demo', 'ask', 'audit', 'docs openapi', 'projections rebuild', 'reply', 'clarify']),
    );
    expect(facts.cli.get('ask')).toContain('--no-events');
  });

  it('README.md, docs/ and the READMEs: settings, npm scripts, CLI commands and options, links, anchors, paths', () => {
    const files = markdownFiles(repo);
    expect(files.map((f) => f.path)).toEqual(expect.arrayContaining(['README.md', 'docs/operations.md', 'docs/performance.md']));
    expect(docsProblems(files, facts)).toEqual([]);
  });

  it('no doc and no source file cites an internal issue number: they say what the behaviour is', () => {
    const files = sourceAndDocFiles(repo);
    expect(files.map((f) => f.path)).toEqual(expect.arrayContaining(['README.md', 'apps/runtime/src/decide.ts', 'test/support/docs-check.ts']));
    expect(issueCitations(files).map((p) => `${p.file}:${p.line}: ${p.name}`)).toEqual([]);
  });

  it('every `npm run ... > file` in the docs, the code and deploy/ passes --silent, so the file holds the output alone', () => {
    // (this file plants such commands to show the check failing)
    const files = sourceAndDocFiles(repo).filter((f) => f.path !== 'test/deploy/docs.test.ts');
    expect(files.map((f) => f.path)).toEqual(expect.arrayContaining(['libs/contracts/test/catalog.test.ts', 'deploy/k8s/base/config.env']));
    expect(bannerRedirects(files).map((p) => `${p.file}:${p.line}: ${p.name}`)).toEqual([]);
  });

  it("names each service's durable consumers as the services make them, in the docs and in deploy/'s comments", () => {
    const files = consumerNamingFiles(repo);
    expect(files.map((f) => f.path)).toEqual(expect.arrayContaining(['docs/operations.md', 'deploy/k8s/base/runtime.yaml']));
    expect(durableNameProblems(files).map((p) => `${p.file}:${p.line}: ${p.name}`)).toEqual([]);
  });

  it('the README: under 200 lines, with exactly the two fresh-machine commands, the second the one .ci/run runs', () => {
    const readme = readFileSync(join(repo, 'README.md'), 'utf8');
    expect(readme.split('\n').length).toBeLessThan(200);
    const quickStart = /## Quick start[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    const commands = quickStart
      .split('\n')
      .map((l) => l.replace(/#.*/, '').trim())
      .filter(Boolean);
    expect(commands).toEqual(['npm ci && npm run demo', 'npm test']);
    expect(readFileSync(join(repo, '.ci', 'run'), 'utf8')).toMatch(/\nnpm test\n/);
  });
});

describe('the checker fails on what does not exist', () => {
  it('reports a planted setting, npm script, command, option, link, anchor and path', () => {
    const planted = [
      // (built here, so that this file does not make it a setting the code mentions)
      `Set \`RUNPLANE_${'NO_SUCH'}_SETTING=1\`, then \`npm run no-such-script\`.`,
      '`npm run runplane -- frobnicate` and `runplane ask --no-such-flag "q"` and `npm run runplane -- docs no-such-doc`',
      'See [gone](docs/no-such-file.md), [bad anchor](docs/operations.md#no-such-heading) and `apps/no-such-app/src/main.ts`.',
      'Cited as docs/guarantees.md#k99. But `kubectl -n runplane rollout restart` is kubectl, and `runplane ask --no-events` exists.',
      `Since ${'issue'} [9] (#${16}) it is faster; nats-server issue 8274 is not ours.`,
    ].join('\n');
    const names = docsProblems([{ path: 'README.md', text: planted }], facts).map((p) => `${p.line}:${p.name}`);
    expect(names).toEqual([
      `1:RUNPLANE_${'NO_SUCH'}_SETTING`,
      '1:npm run no-such-script',
      '2:runplane frobnicate',
      '2:runplane ask --no-such-flag',
      '2:runplane docs no-such-doc',
      '3:docs/no-such-file.md',
      '3:docs/operations.md#no-such-heading',
      '3:apps/no-such-app/src/main.ts',
      '4:docs/guarantees.md#k99',
      `5:${'issue'} [9]`,
      `5:(#${16})`,
    ]);
  });

  it('reports an `npm run ... > file` without --silent, and not one with it or a pipe', () => {
    const planted = [
      'regenerate: npm run runplane -- docs openapi > docs/openapi.json',
      '`npm run runplane --silent -- docs asyncapi > docs/contract/asyncapi.json` and `npm run -s bench -- --json > out.json`',
      '`npm run runplane -- audit | tee x` and `npm run bench -- --only w1 2>&1 > bench.log`',
    ].join('\n');
    const found = bannerRedirects([{ path: 'docs/x.md', text: planted }]).map((p) => `${p.line}:${p.name}`);
    expect(found).toEqual(['1:npm run runplane -- docs openapi >', '3:npm run bench -- --only w1 2>&1 >']);
  });

  it('reports a durable consumer name the services do not make', () => {
    const planted = [
      '# runtime: durable consumer rp-runtime on <prefix>.run.>; rp-recovery-admission fences a cancel',
      'Consumers `<prefix>-tools-p<N>` (`rp-tools-p3`), and `nats consumer rm RUNPLANE rp-projector-p$n`; `runplane-tools` is a Deployment.',
    ].join('\n');
    const found = durableNameProblems([{ path: 'deploy/k8s/base/runtime.yaml', text: planted }]).map((p) => `${p.line}:${p.name}`);
    expect(found).toEqual(['1:rp-runtime', '1:rp-recovery-admission']);
  });

  it('reports an internal issue number in a source comment, also where the comment wraps between the word and the number', () => {
    // (built here, so that this file does not cite them itself)
    const [issue, per] = ['issue', 'per'];
    const planted = [
      `/** Retries wait (K7, ${issue} 14). */`,
      `// claims are met (${issue}`,
      `// [8]); see the fix (#${19}), ${per} ${issue} review; nats-server ${issue} 8274 is upstream's`,
      `const xs = [8]; const first = xs[0]; // a colour '#555' and a sequence (#205) are not issues`,
    ].join('\n');
    const found = issueCitations([{ path: 'libs/x/src/a.ts', text: planted }]).map((p) => `${p.line}:${p.name}`);
    expect(found).toEqual([`1:${issue} 14`, `2:${issue} // [8]`, `3:(#${19})`, `3:${per} ${issue}`]);
  });
});
