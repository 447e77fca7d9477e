/**
 * What the project's Markdown names, checked against what exists (test/deploy/docs.test.ts): every
 * `RUNPLANE_*` setting is read somewhere in the code, every `npm run X` is a package.json script,
 * every `runplane <command> [sub] [--flag]` is a command (and option) of the CLI, every relative
 * link and every `docs/x.md#anchor` resolves to a file (and a heading or an `id`), every
 * repository path written in backticks (`apps/...`, `libs/...`, `docs/...`, ...) exists, and no
 * internal issue number is cited (the word and a number, bracketed or not, or a hash number in
 * parentheses), in the Markdown or in a source comment
 * ({@link issueCitations}); every durable consumer of a service the docs and deploy/ name is one the
 * services make ({@link durableNameProblems}).
 * Pure over what it is given, so a test can show it failing on a planted name.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** A Markdown file to check: its path (relative to the repository root) and its text. */
export interface DocFile {
  path: string;
  text: string;
}

/** The CLI as its help describes it: each command path (`ask`, `docs openapi`) with its long options. */
export type CliCommands = Map<string, Set<string>>;

/** What the docs are checked against. */
export interface DocsFacts {
  /** The repository root (links and backticked paths resolve against it). */
  repo: string;
  /** Every text file of the code (not the docs), concatenated: a setting must occur in it. */
  code: string;
  /** package.json scripts. */
  scripts: Set<string>;
  cli: CliCommands;
}

/** One thing a document names that does not exist: where, what, and why. */
export interface DocProblem {
  file: string;
  line: number;
  name: string;
  problem: string;
}

/** Markdown files the checker reads: README.md, docs/ (recursively) and the READMEs of deploy/, apps/* and libs/*. */
export function markdownFiles(repo: string): DocFile[] {
  const paths = ['README.md', ...walk(repo, 'docs', (p) => p.endsWith('.md'))];
  for (const top of ['deploy', 'apps', 'libs']) {
    if (existsSync(join(repo, top, 'README.md'))) paths.push(`${top}/README.md`);
    if (top === 'deploy') continue;
    for (const d of readdirSync(join(repo, top))) if (existsSync(join(repo, top, d, 'README.md'))) paths.push(`${top}/${d}/README.md`);
  }
  return paths.map((path) => ({ path, text: readFileSync(join(repo, path), 'utf8') }));
}

const CODE_DIRS = ['apps', 'libs', 'scripts', 'deploy', 'test', 'migrations', '.ci'];
const CODE_FILE = /(\.(ts|js|mjs|cjs|sh|ya?ml|json|env|conf)|Dockerfile|\/run)$/;

/** The code a setting must appear in: every text source file under apps, libs, scripts, deploy, test, migrations, .ci (no dist, no Markdown). */
export function codeText(repo: string): string {
  return CODE_DIRS.flatMap((d) => walk(repo, d, (p) => CODE_FILE.test(p)))
    .map((p) => readFileSync(join(repo, p), 'utf8'))
    .join('\n');
}

/** Relative paths of the files under `dir` that `keep` accepts; node_modules, dist and dot folders skipped. */
function walk(repo: string, dir: string, keep: (path: string) => boolean): string[] {
  const found: string[] = [];
  const visit = (rel: string) => {
    const abs = join(repo, rel);
    if (!existsSync(abs)) return;
    if (statSync(abs).isDirectory()) {
      for (const name of readdirSync(abs)) {
        if (name === 'node_modules' || name === 'dist' || (name.startsWith('.') && rel !== '')) continue;
        visit(join(rel, name));
      }
    } else if (keep(rel)) found.push(rel);
  };
  visit(dir);
  return found;
}

/** The part of a commander command the checker reads (commander's `Command`). */
export interface CommandLike {
  name(): string;
  aliases(): string[];
  readonly options: readonly { long?: string }[];
  readonly commands: readonly CommandLike[];
}

/** Every command path of the CLI (`ask`, `docs openapi`, aliases too) with its long options, from its commander program. */
export function cliCommandsOf(program: CommandLike): CliCommands {
  const commands: CliCommands = new Map();
  const visit = (command: CommandLike, path: string[]) => {
    const options = new Set(command.options.flatMap((o) => (o.long ? [o.long] : [])));
    for (const name of [command.name(), ...command.aliases()]) commands.set([...path, name].join(' '), options);
    for (const sub of command.commands) visit(sub, [...path, command.name()]);
  };
  for (const command of program.commands) visit(command, []);
  return commands;
}

// an entry of the project's tracker, also where a comment or a paragraph wraps between the word and
// the number; four-digit numbers are upstream trackers' (`nats-server issue 8274`)
const ISSUE_CITATION = /\bissues?(?:\s|\*|\/\/|#)+(?:\[\d+\]|\d{1,3}\b(?!,\d))|\bper issue\b|\bissues show\b|\(#\d{1,2}\)/gi;

/** The files {@link issueCitations} reads: the Markdown of {@link markdownFiles} and the code of {@link codeText}, but the released (frozen) contracts. */
export function sourceAndDocFiles(repo: string): DocFile[] {
  const code = CODE_DIRS.flatMap((d) => walk(repo, d, (p) => CODE_FILE.test(p) && !p.startsWith('docs/contract/released/')));
  return [...markdownFiles(repo), ...code.map((path) => ({ path, text: readFileSync(join(repo, path), 'utf8') }))];
}

/**
 * Every citation of an internal issue number in `files` (the word and a number, bracketed or not,
 * also across a line break; a hash number in parentheses; "per" or "show" beside the word, as in
 * the checker's own test), in file and line order: a comment or a doc says what the behaviour is or
 * which doc section tells it, never which issue made it. The line is the citation's first.
 */
export function issueCitations(files: readonly DocFile[]): DocProblem[] {
  return files.flatMap((file) =>
    [...file.text.matchAll(ISSUE_CITATION)].map((m) => ({
      file: file.path,
      line: file.text.slice(0, m.index).split('\n').length,
      name: m[0].replace(/\s+/g, ' '),
      problem: 'internal issue number: say what is, without it',
    })),
  );
}

// `npm run <script> [-- args] > file`: what npm prints before the script's own output (its banner)
// lands in the file unless npm is told `--silent` (or `-s`)
const REDIRECTED_NPM_RUN = /npm run [\w:-]+(?: [^`'"\n|]*?)?\s>(?=\s*[\w./$~])/g;

/**
 * Every npm run in `files` whose output goes to a file (`>`) without `--silent` (or `-s`) for npm: the file
 * it writes would start with npm's banner (a regenerate command printed by a staleness test wrote
 * the banner into the generated file), in file and line order.
 */
export function bannerRedirects(files: readonly DocFile[]): DocProblem[] {
  return files.flatMap((file) =>
    [...file.text.matchAll(REDIRECTED_NPM_RUN)]
      .filter((m) => !/ (?:--silent|-s)\b/.test(m[0].split(' -- ')[0]!))
      .map((m) => ({
        file: file.path,
        line: file.text.slice(0, m.index).split('\n').length,
        name: m[0].trim(),
        problem: 'npm writes its banner into the file: npm run --silent',
      })),
  );
}

// a service's durable consumer as the services name it (`<prefix>-<service>-p<N>`, libs/eventlog/src/nest.ts);
// any other `rp-<service>...` is a consumer of a layout that is gone
const SERVICE_DURABLE = /(?<![\w-])(?:rp|<prefix>)-(?:admission|runtime|tools|publication|lifecycle|recovery|projector)(?:-[\w<>$]+)*/g;
const PARTITION_DURABLE = /-p(?:<N>|\d+|\$\w+)$/;

/** The files {@link durableNameProblems} reads: the Markdown of {@link markdownFiles} and deploy/'s manifests and configuration, whose comments name consumers. */
export function consumerNamingFiles(repo: string): DocFile[] {
  const deploy = walk(repo, 'deploy', (p) => CODE_FILE.test(p));
  return [...markdownFiles(repo), ...deploy.map((path) => ({ path, text: readFileSync(join(repo, path), 'utf8') }))];
}

/** Every durable consumer of a service named in `files` otherwise than the services name theirs (`<prefix>-<service>-p<N>`), in file and line order. */
export function durableNameProblems(files: readonly DocFile[]): DocProblem[] {
  return files.flatMap((file) =>
    file.text.split('\n').flatMap((line, i) =>
      [...line.matchAll(SERVICE_DURABLE)]
        .filter(([name]) => !PARTITION_DURABLE.test(name))
        .map(([name]) => ({
          file: file.path,
          line: i + 1,
          name,
          problem: "not a consumer the services make: theirs are '<prefix>-<service>-p<N>'",
        })),
    ),
  );
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slugOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors a Markdown text offers: its headings' slugs (numbered when repeated) and explicit `id`s / `name`s. */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      const slug = slugOf(h[1]!);
      const n = seen.get(slug) ?? 0;
      anchors.add(n === 0 ? slug : `${slug}-${n}`);
      seen.set(slug, n + 1);
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  }
  return anchors;
}

// `npm run runplane [--silent] -- <cmd> ...`, `runplane <cmd> ...` (not kubectl's `-n runplane`), `.../cli/dist/main.js <cmd> ...`
const CLI_MENTION = /(?:npm run runplane(?: --silent)? --|(?<![-\w./]|-n )runplane|apps\/cli\/dist\/main\.js) ([a-z][\w-]*)([^`\n#|]*)/g;
const NPM_RUN = /npm run ([\w:-]+)/g;
const SETTING = /\bRUNPLANE_[A-Z0-9_]*[A-Z0-9]\b/g;
const LINK = /!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g;
const REPO_PATH = /`((?:apps|libs|docs|scripts|deploy|test|migrations|\.ci)\/[^`\s<>*{}|]*)`/g;
const DOC_ANCHOR = /\b(docs\/[\w./-]+\.md)#([\w-]+)/g;
// the project's own tracker (the word and a number, bracketed or not; a hash number in parentheses after a
// bracket): docs say what is, not which tracker entry made it
const INTERNAL_ISSUE = /\bissues? \[\d+\]|\bissues? \d{1,2}\b|(?<=\] )\(#\d+\)|\bissues show\b/gi;

/** Every name in `files` that does not exist in `facts`, in file and line order. */
export function docsProblems(files: readonly DocFile[], facts: DocsFacts): DocProblem[] {
  const problems: DocProblem[] = [];
  const settings = new Map<string, boolean>();
  const exists = (setting: string) => {
    if (!settings.has(setting)) settings.set(setting, new RegExp(`\\b${setting}\\b`).test(facts.code));
    return settings.get(setting)!;
  };
  const anchorCache = new Map<string, Set<string>>();
  const anchorsIn = (abs: string) => {
    if (!anchorCache.has(abs)) anchorCache.set(abs, anchorsOf(readFileSync(abs, 'utf8')));
    return anchorCache.get(abs)!;
  };
  for (const file of files) {
    const own = anchorsOf(file.text);
    const before = problems.length;
    file.text.split('\n').forEach((line, i) => {
      const at = (name: string, problem: string) => problems.push({ file: file.path, line: i + 1, name, problem });
      for (const [ref] of line.matchAll(INTERNAL_ISSUE)) at(ref, 'internal issue number: say what is, without it');
      for (const [name] of line.matchAll(SETTING)) if (!exists(name)) at(name, 'setting read nowhere in apps, libs, scripts, deploy, test');
      for (const [, script] of line.matchAll(NPM_RUN)) if (!facts.scripts.has(script!)) at(`npm run ${script}`, 'not a package.json script');
      for (const [, command, tail] of line.matchAll(CLI_MENTION)) {
        const words = tail!.trim().split(/\s+/);
        const sub = words[0] && /^[a-z][\w-]*$/.test(words[0]) ? `${command} ${words[0]}` : null;
        const path = sub && facts.cli.has(sub) ? sub : command!;
        const options = facts.cli.get(path);
        if (!options) {
          at(`runplane ${command}`, 'not a command of the CLI (apps/cli/src/main.ts)');
          continue;
        }
        if ([...facts.cli.keys()].some((k) => k.startsWith(`${path} `))) {
          if (!sub || !facts.cli.has(sub)) at(`runplane ${command}${words[0] ? ` ${words[0]}` : ''}`, `not a subcommand of runplane ${command}`);
        }
        for (const [flag] of tail!.matchAll(/(?<![\w-])--[a-z][\w-]*/g)) {
          if (flag !== '--help' && !options.has(flag)) at(`runplane ${path} ${flag}`, `not an option of runplane ${path}`);
        }
      }
      for (const [, target] of line.matchAll(LINK)) {
        if (/^[a-z][a-z+.-]*:/i.test(target!)) continue; // http:, https:, mailto:
        const [pathPart, anchor] = target!.split('#') as [string, string | undefined];
        const abs = pathPart === '' ? join(facts.repo, file.path) : resolve(facts.repo, dirname(file.path), decodeURIComponent(pathPart));
        if (!existsSync(abs)) {
          at(target!, 'link to a file that does not exist');
          continue;
        }
        if (anchor && abs.endsWith('.md') && !(pathPart === '' ? own : anchorsIn(abs)).has(anchor)) {
          at(target!, `no heading or id "${anchor}" in ${relative(facts.repo, abs)}`);
        }
      }
      for (const [, path] of line.matchAll(REPO_PATH)) {
        if (!existsSync(join(facts.repo, path!.split('#')[0]!.replace(/[.,:;]$/, '')))) at(path!, 'path does not exist in the repository');
      }
      for (const [, doc, anchor] of line.matchAll(DOC_ANCHOR)) {
        const abs = join(facts.repo, doc!);
        if (existsSync(abs) && !anchorsIn(abs).has(anchor!)) at(`${doc}#${anchor}`, `no heading or id "${anchor}" in ${doc}`);
      }
    });
    // a link whose text also reads as a docs/x.md#anchor is one problem, not two
    const seen = new Set<string>();
    const mine = problems.splice(before).filter((p) => !seen.has(`${p.line}:${p.name}`) && seen.add(`${p.line}:${p.name}`));
    problems.push(...mine);
  }
  return problems;
}
