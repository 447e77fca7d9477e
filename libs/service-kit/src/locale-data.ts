/**
 * Keeps ICU's locale data out of an idle service. `@nestjs/common` builds two
 * `Intl.DateTimeFormat`s when its modules are evaluated (its console logger's and its logger's
 * timestamp formats), and building one maps the default locale's calendar and time zone data of
 * the `node` binary: 6.6 MiB of file pages and 1.8 MiB of heap in a process, for formatters a
 * Runplane service never uses (its logs are pino's JSON with epoch milliseconds, and
 * {@link StartupLogger} prints JSON too). Measured in docs/performance.md ("ICU's locale data left
 * unmapped").
 *
 * {@link deferDateTimeFormat} replaces `Intl.DateTimeFormat` with a constructor of
 * {@link DeferredDateTimeFormat}s, which build the real formatter on their first use, with the same
 * arguments, and answer as it does; {@link restoreDateTimeFormat} puts the original back. A
 * service's `main.ts` imports `@runplane/service-kit/defer-locale-data` (which calls the first)
 * before anything that imports `@nestjs/common`, and `startService` calls the second when it
 * returns or throws, so only what is made while the modules load and the service starts is
 * deferred. This module itself changes nothing when imported.
 */

/** Where the original constructor waits while deferred (a global, so every copy of this module agrees). */
const EAGER = Symbol.for('runplane.service-kit.eagerDateTimeFormat');
type Stash = { [EAGER]?: typeof Intl.DateTimeFormat };

/** The original `Intl.DateTimeFormat`, deferred or not. */
function eagerDateTimeFormat(): typeof Intl.DateTimeFormat {
  return (globalThis as Stash)[EAGER] ?? Intl.DateTimeFormat;
}

/**
 * An `Intl.DateTimeFormat` that builds the real one (with the constructor's arguments) on its
 * first use: `format`, `formatToParts`, `formatRange`, `formatRangeToParts` and
 * `resolvedOptions` answer as the real formatter does. Differences: invalid arguments (an unknown
 * locale tag, say) throw their `RangeError` at that first use instead of at construction, the
 * default time zone is read then too, and it is not an `instanceof Intl.DateTimeFormat`.
 */
export class DeferredDateTimeFormat {
  #real: Intl.DateTimeFormat | null = null;
  #format: Intl.DateTimeFormat['format'] | null = null;
  readonly #args: ConstructorParameters<typeof Intl.DateTimeFormat>;
  readonly #Eager = eagerDateTimeFormat();

  constructor(...args: ConstructorParameters<typeof Intl.DateTimeFormat>) {
    this.#args = args;
  }

  /** The real formatter, built on the first call. */
  get real(): Intl.DateTimeFormat {
    return (this.#real ??= new this.#Eager(...this.#args));
  }

  /** As the real `format` getter: the same function, bound to the formatter, on every read. */
  get format(): Intl.DateTimeFormat['format'] {
    return (this.#format ??= (date?: Date | number) => this.real.format(date));
  }

  formatToParts(date?: Date | number): Intl.DateTimeFormatPart[] {
    return this.real.formatToParts(date);
  }

  formatRange(start: Date | number, end: Date | number): string {
    return this.real.formatRange(start, end);
  }

  formatRangeToParts(start: Date | number, end: Date | number): Intl.DateTimeRangeFormatPart[] {
    return this.real.formatRangeToParts(start, end);
  }

  resolvedOptions(): Intl.ResolvedDateTimeFormatOptions {
    return this.real.resolvedOptions();
  }

  get [Symbol.toStringTag](): string {
    return 'Intl.DateTimeFormat';
  }
}

/**
 * `Intl.DateTimeFormat` while deferred: callable with or without `new`, as the original is,
 * building a {@link DeferredDateTimeFormat}; `supportedLocalesOf` is the original's.
 */
function deferredConstructor(...args: ConstructorParameters<typeof Intl.DateTimeFormat>): DeferredDateTimeFormat {
  return new DeferredDateTimeFormat(...args);
}
deferredConstructor.supportedLocalesOf = (...args: Parameters<typeof Intl.DateTimeFormat.supportedLocalesOf>) =>
  eagerDateTimeFormat().supportedLocalesOf(...args);

/** Defers every `Intl.DateTimeFormat` made from now on until its first use (see the module). Idempotent. */
export function deferDateTimeFormat(): void {
  const stash = globalThis as Stash;
  if (stash[EAGER]) return;
  stash[EAGER] = Intl.DateTimeFormat;
  Intl.DateTimeFormat = deferredConstructor as unknown as typeof Intl.DateTimeFormat;
}

/** Puts the original `Intl.DateTimeFormat` back (formatters already made stay deferred). Idempotent. */
export function restoreDateTimeFormat(): void {
  const stash = globalThis as Stash;
  const eager = stash[EAGER];
  if (!eager) return;
  Intl.DateTimeFormat = eager;
  delete stash[EAGER];
}

/** Whether `Intl.DateTimeFormat` is deferred now. */
export function dateTimeFormatDeferred(): boolean {
  return (globalThis as Stash)[EAGER] !== undefined;
}
