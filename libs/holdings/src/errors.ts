/**
 * Typed failures of the fund-research tools. Every error a tool call can report to the model is a
 * {@link ToolFailure} with a stable machine-readable `code` and a human sentence in `message`.
 */

/** Why a tool call failed. */
export type ToolFailureCode = 'unknown_tool' | 'bad_arguments' | 'unknown_fund' | 'no_file_for_date' | 'no_readable_date' | 'unreadable_file';

/**
 * A tool call that failed for a reason the caller (the model) can act on.
 *
 * - `unknown_tool`: the tool name is not in the contract's `ToolPack`.
 * - `bad_arguments`: the arguments failed the contract's zod schema (the message quotes zod's reason).
 * - `unknown_fund`: no file in the data folder covers the fund (the message lists the funds that are covered).
 * - `no_file_for_date`: the fund is covered but has no file with the requested as-of date (the message lists the dates).
 * - `no_readable_date`: no date was requested and the fund has several files, none stating a readable date, so none is the newest.
 * - `unreadable_file`: a file (or the data folder itself) could not be read or parsed.
 */
export class ToolFailure extends Error {
  override readonly name = 'ToolFailure';

  constructor(
    readonly code: ToolFailureCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** True when `error` is a {@link ToolFailure} (optionally with the given code). */
export function isToolFailure(error: unknown, code?: ToolFailureCode): error is ToolFailure {
  return error instanceof ToolFailure && (code === undefined || error.code === code);
}
