/**
 * What `runplane audit` is asked to read is checked before anything connects (docs/cli.md
 * "Auditing"): a bad selection gets its reason and exit 1 at once, not a NATS error first, and
 * `checkAuditSelection` (libs/audit, the one rule the audit's reader applies too) given/when/then.
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from '@jest/globals';
import { checkAuditSelection } from '@runplane/audit';

/** The built CLI (apps/cli/dist/main.js). */
const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));

describe('checkAuditSelection', () => {
  const run = randomUUID();
  it('given one Run, or every Run with or without a time, then it is accepted (with the time in epoch ms)', () => {
    expect(checkAuditSelection({ run })).toBeNull();
    expect(checkAuditSelection({ all: true })).toBeNull();
    expect(checkAuditSelection({ all: true, since: '2026-12-01T00:00:00Z' })).toBe(Date.parse('2026-12-01T00:00:00Z'));
  });

  it('given neither, both, --since with --run, a bad id or a bad time, then each is refused with its reason', () => {
    const cases: [Parameters<typeof checkAuditSelection>[0], RegExp][] = [
      [{}, /name one Run \(--run <id>\) or every Run \(--all\)/],
      [{ run, all: true }, /--run names one Run and --all every Run: give one of them, not both/],
      [{ run, since: '2026-12-01T00:00:00Z' }, /--run audits the named Run whole/],
      [{ run: 'a.b' }, /not a run id: "a\.b"/],
      [{ all: true, since: 'yesterday-ish' }, /--since: not a time: "yesterday-ish"/],
    ];
    for (const [selection, reason] of cases) expect(() => checkAuditSelection(selection)).toThrow(reason);
  });
});

describe('runplane audit with a bad selection', () => {
  it('given --run and --all together, then exit 1 with the reason before it connects (NATS_URL names a port nothing listens on)', () => {
    const r = spawnSync(process.execPath, [CLI, 'audit', '--run', randomUUID(), '--all'], {
      env: { ...process.env, NATS_URL: 'nats://127.0.0.1:1', NATS_CA_FILE: '', RUNPLANE_STREAM: 'RP_NEVER_READ' },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^runplane: .*--run names one Run and --all every Run: give one of them, not both/m);
    expect(r.stdout).not.toContain('reading stream'); // nothing was read, nor announced
    expect(r.stderr).not.toMatch(/127\.0\.0\.1:1\b/);
  });
});
