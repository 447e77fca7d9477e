/**
 * Keeps ICU's locale data out of an idle service. `@nestjs/common` builds an
 * `Intl.DateTimeFormat` when its module is evaluated (its console logger's timestamp format), and
 * building one maps the default locale's calendar and time zone data of the `node` binary: 6.6 MiB
 * of file pages and 1.8 MiB of heap in every process, for a formatter a Runplane service never
 * uses (its logs are pino's JSON with epoch milliseconds, and {@link StartupLogger} prints JSON
 * too). Measured in docs/performance.md ("Idle RSS").
 *
 * Evaluating this module replaces `Intl.DateTimeFormat` with {@link DeferredDateTimeFormat}, whose
 * instances build the real formatter on their first use, with the same arguments, and answer
 * exactly as it does; {@link restoreDateTimeFormat} puts the original back. Import it before
 * anything that imports `@nestjs/common` (the first line of each service's `main.ts`);
 * service-kit's `runService` restores the original once every module is loaded, so only formatters
 * made while the modules load are deferred.
 */
const EagerDateTimeFormat = Intl.DateTimeFormat;

/**
 * An `Intl.DateTimeFormat` that builds the real one (with the constructor's arguments) on its
 * first use: `format`, `formatToParts`, `formatRange`, `formatRangeToParts` and
 * `resolvedOptions` answer as the real formatter does. Invalid arguments (an unknown locale tag,
 * say) throw their `RangeError` at that first use instead of at construction.
 */
export class DeferredDateTimeFormat {
  #real: Intl.DateTimeFormat | null = null;
  readonly #args: ConstructorParameters<typeof Intl.DateTimeFormat>;

  constructor(...args: ConstructorParameters<typeof Intl.DateTimeFormat>) {
    this.#args = args;
  }

  /** The real formatter, built on the first call. */
  get real(): Intl.DateTimeFormat {
    return (this.#real ??= new EagerDateTimeFormat(...this.#args));
  }

  /** As the real `format` getter: a function bound to the formatter. */
  get format(): Intl.DateTimeFormat['format'] {
    const real = this.real;
    return (date?: Date | number) => real.format(date);
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

  static supportedLocalesOf(...args: Parameters<typeof Intl.DateTimeFormat.supportedLocalesOf>): string[] {
    return EagerDateTimeFormat.supportedLocalesOf(...args);
  }
}

/**
 * `Intl.DateTimeFormat` while the modules load: callable with or without `new`, as the original
 * is, and building a {@link DeferredDateTimeFormat}.
 */
function deferredConstructor(...args: ConstructorParameters<typeof Intl.DateTimeFormat>): DeferredDateTimeFormat {
  return new DeferredDateTimeFormat(...args);
}
deferredConstructor.supportedLocalesOf = (...args: Parameters<typeof Intl.DateTimeFormat.supportedLocalesOf>) =>
  EagerDateTimeFormat.supportedLocalesOf(...args);

Intl.DateTimeFormat = deferredConstructor as unknown as typeof Intl.DateTimeFormat;

/** Puts the original `Intl.DateTimeFormat` back (formatters already made stay deferred). Idempotent. */
export function restoreDateTimeFormat(): void {
  Intl.DateTimeFormat = EagerDateTimeFormat;
}

/** Whether `Intl.DateTimeFormat` is still the deferring one (for tests). */
export function dateTimeFormatDeferred(): boolean {
  return Intl.DateTimeFormat !== EagerDateTimeFormat;
}
