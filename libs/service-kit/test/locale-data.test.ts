/**
 * ICU's locale data stays unmapped while a service's modules load (service-kit locale-data.ts):
 * `Intl.DateTimeFormat` is deferred, a deferred formatter answers as the real one does, the
 * original comes back with `restoreDateTimeFormat` and whenever `startService` returns or throws,
 * and, in a real process, loading `@nestjs/common` after the deferral leaves the locale data to the
 * first real formatter.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { Module } from '@nestjs/common';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { DrainConfig } from '@runplane/contracts';
import { startService } from '../src/index.js';
import { dateTimeFormatDeferred, deferDateTimeFormat, DeferredDateTimeFormat, restoreDateTimeFormat } from '../src/locale-data.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const options: Intl.DateTimeFormatOptions = {
  year: 'numeric',
  month: '2-digit',
  day: '2-digit',
  hour: 'numeric',
  minute: 'numeric',
  timeZone: 'UTC',
};
const when = Date.UTC(2026, 11, 5, 13, 7, 9);
const Original = Intl.DateTimeFormat;

afterEach(() => restoreDateTimeFormat());

describe('deferred Intl.DateTimeFormat', () => {
  it('given the module imported alone, then nothing is deferred', () => {
    expect(dateTimeFormatDeferred()).toBe(false);
    expect(Intl.DateTimeFormat).toBe(Original);
  });

  it('given the deferral, when a formatter is made with or without new, then it is deferred and formats as the real one', () => {
    deferDateTimeFormat();
    deferDateTimeFormat(); // idempotent: restoring once brings the original back
    expect(dateTimeFormatDeferred()).toBe(true);
    // the original is callable without new too
    const made = [
      new Intl.DateTimeFormat('en-GB', options),
      (Intl.DateTimeFormat as unknown as (...a: unknown[]) => Intl.DateTimeFormat)('en-GB', options),
    ];
    expect(Intl.DateTimeFormat.supportedLocalesOf(['en-GB'])).toEqual(['en-GB']);
    restoreDateTimeFormat();
    expect(Intl.DateTimeFormat).toBe(Original);
    const real = new Intl.DateTimeFormat('en-GB', options);
    for (const f of made) {
      expect(f).toBeInstanceOf(DeferredDateTimeFormat);
      expect(Object.prototype.toString.call(f)).toBe(Object.prototype.toString.call(real));
      const deferred = f as unknown as DeferredDateTimeFormat;
      expect(deferred.format).toBe(deferred.format);
      expect(f.format(when)).toBe(real.format(when));
      expect(f.formatToParts(when)).toEqual(real.formatToParts(when));
      expect(f.formatRange(when, when + 86_400_000)).toBe(real.formatRange(when, when + 86_400_000));
      expect(f.resolvedOptions()).toEqual(real.resolvedOptions());
    }
  });

  it('given the original restored, when restored again, then it stays the original', () => {
    restoreDateTimeFormat();
    restoreDateTimeFormat();
    expect(dateTimeFormatDeferred()).toBe(false);
    expect(new Intl.DateTimeFormat('en-GB', options)).toBeInstanceOf(Original);
  });

  it('given a deferred formatter with a bad locale, when first used, then it throws the RangeError the real one throws', () => {
    deferDateTimeFormat();
    const f = new Intl.DateTimeFormat('not a locale!');
    expect(() => f.format(when)).toThrow(RangeError);
  });
});

describe('startService', () => {
  @Module({})
  class EmptyModule {}
  const spec = { name: 'lifecycle' as const, module: EmptyModule, portEnv: 'RUNPLANE_LOCALE_TEST_PORT', defaultPort: 0 };

  it('given the deferral, when a service starts, then Intl.DateTimeFormat is the original again', async () => {
    deferDateTimeFormat();
    const { app } = await startService(spec, { logLevel: 'silent' });
    try {
      expect(dateTimeFormatDeferred()).toBe(false);
      expect(Intl.DateTimeFormat).toBe(Original);
    } finally {
      await app.close();
    }
  });

  it('given the deferral, when a service fails to start (a drain the shutdown bound would cut), then Intl.DateTimeFormat is the original again', async () => {
    deferDateTimeFormat();
    const saved = { drain: process.env.RUNPLANE_DRAIN_SECONDS, grace: process.env.RUNPLANE_SHUTDOWN_GRACE_SECONDS };
    process.env.RUNPLANE_DRAIN_SECONDS = '30';
    process.env.RUNPLANE_SHUTDOWN_GRACE_SECONDS = '25';
    try {
      await expect(startService({ ...spec, config: [DrainConfig] })).rejects.toThrow(/RUNPLANE_DRAIN_SECONDS/);
    } finally {
      for (const [k, v] of [
        ['RUNPLANE_DRAIN_SECONDS', saved.drain],
        ['RUNPLANE_SHUTDOWN_GRACE_SECONDS', saved.grace],
      ] as const)
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
    }
    expect(dateTimeFormatDeferred()).toBe(false);
    expect(Intl.DateTimeFormat).toBe(Original);
  });
});

/**
 * File-backed RSS (the `node` binary's pages, MiB) gained by the first real formatter, in a fresh
 * process that loaded `@nestjs/common` (built) before, with or without the deferral first.
 */
function localeDataMappedByFirstFormatter(deferred: boolean): number {
  const script = [
    deferred ? "await import('@runplane/service-kit/defer-locale-data');" : '',
    "await import('@nestjs/common');",
    "const { readFileSync } = await import('node:fs');",
    "const fileMiB = () => Number(/RssFile:\\s+(\\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]) / 1024;",
    'const before = fileMiB();',
    "new Intl.DateTimeFormat(undefined, { year: 'numeric', hour: 'numeric' }).format(Date.now());",
    'process.stdout.write(String(fileMiB() - before));',
  ].join('\n');
  return Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' }));
}

describe('a process that loads @nestjs/common', () => {
  it('maps ICU locale data only with its first real formatter when the deferral loads first, and at load without it', () => {
    // measured: 6.6 MiB on Node 24 (docs/performance.md); the bounds leave room for other builds
    expect(localeDataMappedByFirstFormatter(true)).toBeGreaterThan(3);
    expect(localeDataMappedByFirstFormatter(false)).toBeLessThan(1);
  });
});
