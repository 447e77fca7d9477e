/**
 * `runplane demo <question>` refuses a question admission would refuse (the contracts'
 * `MessageContent`: blank, invisible, too long) before it starts anything: no NATS, no services,
 * no scripted model, a clear message and exit 1, in about the time the CLI takes to start (a trial
 * saw a blank question start the whole stack first, then fail on admission's 400).
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from '@jest/globals';

/** The built CLI (apps/cli/dist/main.js). */
const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const demo = (question: string) => spawnSync(process.execPath, [CLI, 'demo', question, '--no-events'], { encoding: 'utf8', timeout: 60_000 });

describe('runplane demo <question>', () => {
  it.each([
    ['a blank', '   ', 'content must not be blank'],
    ['an invisible', '\u200b\u200b', 'content must show something'],
    ['a too long', 'x'.repeat(20_001), 'content is at most 20000 characters'],
  ])('given %s question, then it is refused before anything starts, exit 1', (_kind, question, reason) => {
    const r = demo(question);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`runplane: the question: ${reason}`);
    expect(r.stderr).toContain('(nothing was started)');
    // nothing of a stack was started or printed
    expect(r.stdout).toBe('');
  });
});
