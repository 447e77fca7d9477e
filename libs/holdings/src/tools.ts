/**
 * {@link executeTool}: the tool-pack boundary. Validates a model's raw arguments with the
 * contract's zod schema, runs the tool on a {@link HoldingsLibrary}, and validates the result.
 */
// the tool pack alone (not the event catalogue, configuration and HTTP schemas): this module loads
// in every tool thread
import { ToolPack, type ToolName } from '@runplane/contracts/tools';
import { z } from 'zod';
import { ToolFailure } from './errors.js';
import type { HoldingsLibrary } from './library.js';

/** True when `name` is one of the contract's tool names. */
export function isToolName(name: string): name is ToolName {
  return Object.prototype.hasOwnProperty.call(ToolPack, name);
}

/**
 * Runs tool `name` with `rawArgs` (as the model sent them; `undefined`/`null` count as `{}`).
 *
 * @returns the tool's result, parsed by the contract's result schema (unknown keys stripped).
 * @throws ToolFailure `unknown_tool` (name not in the pack), `bad_arguments` (message includes
 *   zod's reason), or whatever the tool throws (`unknown_fund`, `no_file_for_date`,
 *   `unreadable_file`).
 * @throws Error when the result does not satisfy the result schema (a bug in this library).
 */
export async function executeTool(library: HoldingsLibrary, name: string, rawArgs: unknown): Promise<unknown> {
  if (!isToolName(name)) {
    throw new ToolFailure('unknown_tool', `Unknown tool ${JSON.stringify(name)}; the tools are ${Object.keys(ToolPack).join(', ')}.`);
  }
  const spec = ToolPack[name];
  const parsedArgs = spec.args.safeParse(rawArgs ?? {});
  if (!parsedArgs.success) {
    throw new ToolFailure('bad_arguments', `Bad arguments for ${name}: ${describeIssues(parsedArgs.error)}.`);
  }
  const result = await run(library, name, parsedArgs.data);
  const checked = spec.result.safeParse(result);
  if (!checked.success) {
    throw new Error(`Result of ${name} does not match its contract: ${describeIssues(checked.error)}`);
  }
  return checked.data;
}

/** zod issues as one line: `asOf: date must be YYYY-MM-DD; fundB: Invalid input: expected string, received undefined`. */
function describeIssues(error: z.ZodError): string {
  return error.issues.map((issue) => (issue.path.length > 0 ? `${issue.path.join('.')}: ` : '') + issue.message).join('; ');
}

/** What runs each tool of the pack, on its parsed arguments; its result is checked against the pack's schema. */
type ToolRunners = { [N in ToolName]: (library: HoldingsLibrary, args: z.output<(typeof ToolPack)[N]['args']>) => Promise<unknown> };

/**
 * One runner per tool name of the contract's pack: a tool added to `ToolPack` without a runner
 * here is a type error, not a call that fails at run time with an `undefined` result.
 */
const RUNNERS: ToolRunners = {
  list_funds: (library) => library.listFunds(),
  get_holdings: (library, args) => library.getHoldings(args),
  compare_holdings: (library, args) => library.compareHoldings(args),
  fund_metadata: (library, args) => library.fundMetadata(args),
};

function run(library: HoldingsLibrary, name: ToolName, args: unknown): Promise<unknown> {
  // `args` was parsed by ToolPack[name].args just before: the runner of `name` takes exactly that
  return (RUNNERS[name] as (library: HoldingsLibrary, args: unknown) => Promise<unknown>)(library, args);
}
