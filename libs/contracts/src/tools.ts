/**
 * Tool pack contract: the fund-research tools the model may call, with zod schemas for their
 * arguments and results. Shared by the tools service (executes them), the runtime (offers them to
 * the model as function tools) and the scripted model's research policy (reads their results).
 *
 * Conventions: dates are ISO `YYYY-MM-DD` strings read from inside the file, or `null` when the
 * file carries no date ("undated", never invented). Weights are percentages of the fund
 * (e.g. 7.15 means 7.15 %), as the issuer file states them.
 */
import { z } from 'zod';

export const IsoDate = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'date must be YYYY-MM-DD');
export const FundTicker = z
  .string()
  .trim()
  .min(1)
  .max(12)
  .transform((s) => s.toUpperCase());

/** Which issuer layout a holdings file uses. */
export const IssuerFormat = z.enum(['ssga-xlsx', 'ishares-csv', 'invesco-csv', 'ark-csv']);
export type IssuerFormat = z.infer<typeof IssuerFormat>;

/** How a non-security line of a holdings file was classified (kept, not dropped). */
export const NonSecurityKind = z.enum(['cash', 'money-market', 'futures', 'collateral', 'other']);

export const HoldingLine = z.object({
  ticker: z.string().nullable(),
  name: z.string(),
  cusip: z.string().nullable(),
  weight: z.number(),
});
export type HoldingLine = z.infer<typeof HoldingLine>;

export const NonSecurityLine = HoldingLine.extend({ kind: NonSecurityKind });

/** One holdings file as found in the data folder. */
export const HoldingsFileInfo = z.object({
  fund: z.string(),
  file: z.string(),
  issuerFormat: IssuerFormat,
  asOf: IsoDate.nullable(),
});
export type HoldingsFileInfo = z.infer<typeof HoldingsFileInfo>;

// ---- list_funds -------------------------------------------------------------------------------
export const ListFundsArgs = z.object({}).strict();
export const ListFundsResult = z.object({
  /** `shared` = the real issuer files; `illustrative` = the small sample the project ships. */
  dataSet: z.enum(['shared', 'illustrative']),
  funds: z.array(z.object({ fund: z.string(), files: z.array(HoldingsFileInfo) })),
  /** Files present but not holdings files this pack reads (fact sheets, scrapes), by name. */
  otherFiles: z.array(z.string()),
});
export type ListFundsResult = z.infer<typeof ListFundsResult>;

// ---- get_holdings -----------------------------------------------------------------------------
export const GetHoldingsArgs = z
  .object({
    fund: FundTicker,
    /** Pick the file with this as-of date; absent = the latest dated file. */
    asOf: IsoDate.optional(),
  })
  .strict();
export const HoldingsSummary = HoldingsFileInfo.extend({
  securityCount: z.number().int(),
  nonSecurityLines: z.array(NonSecurityLine),
  /** Sum of every line's weight, securities and non-security lines, as the file states them. */
  weightSum: z.number(),
  securitiesWeightSum: z.number(),
});
export type HoldingsSummary = z.infer<typeof HoldingsSummary>;
export const GetHoldingsResult = HoldingsSummary.extend({
  /** The largest securities by weight (at most 25). */
  top: z.array(HoldingLine),
});
export type GetHoldingsResult = z.infer<typeof GetHoldingsResult>;

// ---- compare_holdings -------------------------------------------------------------------------
export const CompareHoldingsArgs = z
  .object({
    fundA: FundTicker,
    fundB: FundTicker,
    /** As-of dates to pick files by; when both are absent the pair with the closest dates is used. */
    asOfA: IsoDate.optional(),
    asOfB: IsoDate.optional(),
  })
  .strict();
export const CompareHoldingsResult = z.object({
  a: HoldingsSummary,
  b: HoldingsSummary,
  /** Whole days from the earlier to the later as-of date; null when either file is undated. */
  daysBetween: z.number().int().nullable(),
  commonCount: z.number().int(),
  /** Securities of A not held by B, and of B not held by A, heaviest first. */
  onlyInA: z.array(HoldingLine),
  onlyInB: z.array(HoldingLine),
  /** Percent of A's weight (sum of A's weights over securities B also holds). */
  weightOfAHeldInB: z.number(),
  /** Percent of B's weight (sum of B's weights over securities A also holds). */
  weightOfBHeldInA: z.number(),
  /** How the common securities were matched: by CUSIP where both files have it, else by ticker. */
  matchedBy: z.object({ cusip: z.number().int(), ticker: z.number().int() }),
});
export type CompareHoldingsResult = z.infer<typeof CompareHoldingsResult>;

// ---- fund_metadata ----------------------------------------------------------------------------
export const FundMetadataArgs = z.object({ fund: FundTicker }).strict();
export const FundMetadataResult = z.object({
  fund: z.string(),
  /** Facts as the files state them; each with the file it came from and that file's date. */
  facts: z.array(z.object({ field: z.string(), value: z.string(), source: z.string(), asOf: IsoDate.nullable() })),
});
export type FundMetadataResult = z.infer<typeof FundMetadataResult>;

/** The tool pack: name -> argument schema, result schema and a description for the model. */
export const ToolPack = {
  list_funds: {
    args: ListFundsArgs,
    result: ListFundsResult,
    description: 'List the funds and holdings files in the data folder, each with its as-of date read from inside the file (null = undated).',
  },
  get_holdings: {
    args: GetHoldingsArgs,
    result: GetHoldingsResult,
    description:
      'Holdings of one fund from one issuer file (latest, or the file as of a given YYYY-MM-DD date): security count, cash and non-security lines, weight sums, top holdings.',
  },
  compare_holdings: {
    args: CompareHoldingsArgs,
    result: CompareHoldingsResult,
    description:
      "Compare two funds' holdings files: securities in common, names held by only one, weight of each fund held by the other, weight sums and the days between the two as-of dates.",
  },
  fund_metadata: {
    args: FundMetadataArgs,
    result: FundMetadataResult,
    description: 'Fund facts that the data files state (name, inception date, shares outstanding, expense ratio...), each with its source file.',
  },
} as const;
export type ToolName = keyof typeof ToolPack;
export const ToolNames = Object.keys(ToolPack) as ToolName[];

/**
 * What the model reads back for one tool call (the `content` of the `role: "tool"` message the
 * runtime builds from a receipt). An `unknown` outcome is shown as unknown, never as success (K5);
 * a failed or denied call is shown as such and the Run goes on (K8).
 */
export const ToolMessageContent = z.discriminatedUnion('status', [
  z.object({ status: z.literal('succeeded'), result: z.unknown() }),
  z.object({
    status: z.enum(['failed', 'denied', 'unknown']),
    error: z.object({ code: z.string(), message: z.string() }),
  }),
]);
export type ToolMessageContent = z.infer<typeof ToolMessageContent>;
