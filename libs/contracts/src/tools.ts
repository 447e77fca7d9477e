/**
 * Tool pack contract: the fund-research tools the model may call, with zod schemas for their
 * arguments and results. Shared by the tools service (executes them), the runtime (offers them to
 * the model as function tools) and the scripted model's research policy (reads their results).
 *
 * Conventions: dates are ISO `YYYY-MM-DD` strings read from inside the file, or `null` when the
 * file carries no date ("undated", never invented). Weights are percentages of the fund
 * (e.g. 7.15 means 7.15 %), as the issuer file states them.
 */
import { createHash } from 'node:crypto';
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

/** A value of a holdings line that the file states but that cannot be read as a number (`N/A`, `-`, blank, text). */
export const UnreadableValue = z.object({
  field: z.enum(['weight', 'shares', 'marketValue', 'price']),
  /** The cell exactly as the file writes it ('' for a blank cell). */
  text: z.string(),
});
export type UnreadableValue = z.infer<typeof UnreadableValue>;

export const HoldingLine = z.object({
  ticker: z.string().nullable(),
  name: z.string(),
  cusip: z.string().nullable(),
  /** Percent of the fund; `null` when the file's weight cannot be read (never taken as 0; see `unreadable`). */
  weight: z.number().nullable(),
  /** ISIN / SEDOL where the file carries them. */
  isin: z.string().nullable().optional(),
  sedol: z.string().nullable().optional(),
  /** Where the security trades, as the file says it (`India, National Stock Exchange Of India`), or how it was inferred. */
  market: z.string().nullable().optional(),
  /** Values the file states but that cannot be read (the line is kept; figures from it are labelled). */
  unreadable: z.array(UnreadableValue).optional(),
});
export type HoldingLine = z.infer<typeof HoldingLine>;

export const NonSecurityLine = HoldingLine.extend({ kind: NonSecurityKind });

/** The layout a source file was read in: an issuer holdings layout, a fund fact sheet or the ETF overview table. */
export const SourceLayout = z.enum(['ssga-xlsx', 'ishares-csv', 'invesco-csv', 'ark-csv', 'fact-sheet-md', 'overview-csv']);

/**
 * How a file's as-of date was established: read from a preamble line (`preamble`), from the
 * per-row date column (`row-date-column`), from the fact sheet's `As of` line (`fact-sheet-line`);
 * `unreadable` = the file has a date line that cannot be read as a date (the file is NOT undated
 * and is never given its name's date); `absent` = the file states no date at all (undated).
 */
export const AsOfHow = z.enum(['preamble', 'row-date-column', 'fact-sheet-line', 'unreadable', 'absent']);
export type AsOfHow = z.infer<typeof AsOfHow>;

/**
 * What a tool read, so that a continuation or an auditor can check the material without the
 * answer text: the file, the sha256 of its bytes, the layout it was read in, and its as-of date
 * with how that date was established and the text it came from.
 */
export const Provenance = z.object({
  file: z.string(),
  /** Lower-case hex sha256 of the file's bytes as read. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  layout: SourceLayout,
  asOf: IsoDate.nullable(),
  asOfHow: AsOfHow,
  /** The text the date was read from, or the date line that could not be read; `null` when the file states none. */
  asOfText: z.string().nullable(),
});
export type Provenance = z.infer<typeof Provenance>;

/** One holdings file as found in the data folder. */
export const HoldingsFileInfo = z.object({
  fund: z.string(),
  file: z.string(),
  issuerFormat: IssuerFormat,
  asOf: IsoDate.nullable(),
  provenance: Provenance,
});
export type HoldingsFileInfo = z.infer<typeof HoldingsFileInfo>;

/**
 * Why a tool read the file it read for a fund: the file of the requested date, the newest file,
 * or the pair of files with the closest as-of dates between the two funds.
 */
export const FileSelection = z.object({
  rule: z.enum(['requested-date', 'newest', 'closest-dates']),
  /** The requested `YYYY-MM-DD` date, for `requested-date`. */
  requested: IsoDate.optional(),
  detail: z.string(),
});
export type FileSelection = z.infer<typeof FileSelection>;

// ---- list_funds -------------------------------------------------------------------------------
export const ListFundsArgs = z.object({}).strict();
export const ListFundsResult = z.object({
  /** `shared` = the real issuer files; `illustrative` = the small sample the project ships. */
  dataSet: z.enum(['shared', 'illustrative']),
  funds: z.array(z.object({ fund: z.string(), files: z.array(HoldingsFileInfo) })),
  /** Files present but not holdings files this pack reads (fact sheets, scrapes), by name. */
  otherFiles: z.array(z.string()),
  /** Each other file with what it is and, when it could not be read as holdings, why (in plain words). */
  otherFileNotes: z.array(z.object({ file: z.string(), kind: z.enum(['fact-sheet', 'overview-table', 'not-holdings']), reason: z.string() })),
});
export type ListFundsResult = z.infer<typeof ListFundsResult>;

// ---- get_holdings -----------------------------------------------------------------------------
export const GetHoldingsArgs = z
  .object({
    fund: FundTicker,
    /** Pick the file with this as-of date; absent = the latest dated file. */
    asOf: IsoDate.optional(),
    /** How many of the heaviest securities to list in `top` (default 25). */
    top: z.number().int().min(1).max(500).optional(),
  })
  .strict();
export const HoldingsSummary = HoldingsFileInfo.extend({
  securityCount: z.number().int(),
  nonSecurityLines: z.array(NonSecurityLine),
  /** Sum of every readable weight, securities and non-security lines, as the file states them. */
  weightSum: z.number(),
  securitiesWeightSum: z.number(),
  /** Lines whose weight cannot be read (kept, never taken as 0): the sums above leave them out. */
  unreadableWeightLines: z.array(HoldingLine.extend({ kind: z.enum(['security', ...NonSecurityKind.options]) })),
});
export type HoldingsSummary = z.infer<typeof HoldingsSummary>;
export const GetHoldingsResult = HoldingsSummary.extend({
  /** The largest securities by readable weight (25, or the `top` asked for); unreadable weights are in `unreadableWeightLines`. */
  top: z.array(HoldingLine),
  selection: FileSelection,
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
/** How a security of one file was found in the other: by an identifier, or by a fallback. */
export const MatchMethod = z.enum(['cusip', 'isin', 'sedol', 'ticker', 'name']);
export type MatchMethod = z.infer<typeof MatchMethod>;

export const CompareHoldingsResult = z.object({
  a: HoldingsSummary,
  b: HoldingsSummary,
  selectionA: FileSelection,
  selectionB: FileSelection,
  /** Whole days from the earlier to the later as-of date; null when either file is undated. */
  daysBetween: z.number().int().nullable(),
  /** Securities matched one to one between the files. */
  commonCount: z.number().int(),
  /** Securities of A not held by B, and of B not held by A, heaviest first. */
  onlyInA: z.array(HoldingLine),
  onlyInB: z.array(HoldingLine),
  /** Percent of A's weight (sum of A's readable weights over securities B also holds). */
  weightOfAHeldInB: z.number(),
  /** Percent of B's weight (sum of B's readable weights over securities A also holds). */
  weightOfBHeldInA: z.number(),
  /** The standard overlap, percent: the sum over common securities of the smaller of the two weights. */
  standardOverlap: z.number(),
  /** Common securities left out of the weight figures because a weight cannot be read (the figures are then lower bounds). */
  commonWithUnreadableWeight: z.number().int(),
  /** The strongest identifier both files carry, which the match tries first (`ticker` = ticker on the same market). */
  strongestSharedIdentifier: z.enum(['cusip', 'isin', 'sedol', 'ticker']),
  /** How the common securities were matched. */
  matchedBy: z.object({ cusip: z.number().int(), isin: z.number().int(), sedol: z.number().int(), ticker: z.number().int(), name: z.number().int() }),
  /** Matches made by a weaker key than `strongestSharedIdentifier` (an identifier changed), each with why. */
  fallbackMatches: z.array(z.object({ a: HoldingLine, b: HoldingLine, method: MatchMethod, why: z.string() })),
  /** Lines that look alike but were NOT matched (same ticker on different markets, ambiguous names), each with why. */
  notMatched: z.array(z.object({ a: HoldingLine, b: HoldingLine, why: z.string() })),
});
export type CompareHoldingsResult = z.infer<typeof CompareHoldingsResult>;

// ---- fund_metadata ----------------------------------------------------------------------------
export const FundMetadataArgs = z.object({ fund: FundTicker }).strict();
export const FundMetadataResult = z.object({
  fund: z.string(),
  /** Facts as the files state them; each with the file it came from and that file's date. */
  facts: z.array(z.object({ field: z.string(), value: z.string(), source: z.string(), asOf: IsoDate.nullable() })),
  /** Every file the facts came from, with its provenance. */
  sources: z.array(Provenance),
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
      'Holdings of one fund from one issuer file (latest, or the file as of a given YYYY-MM-DD date): security count, cash and non-security lines, weight sums (unreadable weights reported apart), the top N holdings, and what file was read (sha256, layout, how its date was established).',
  },
  compare_holdings: {
    args: CompareHoldingsArgs,
    result: CompareHoldingsResult,
    description:
      "Compare two funds' (or one fund's two dates') holdings files: securities in common matched on the strongest identifier both carry (CUSIP, ISIN, SEDOL; tickers only on the same market; then names), fallback matches listed, names held by only one, weight of each fund held by the other, the standard overlap (sum of the smaller weights) and the days between the two as-of dates.",
  },
  fund_metadata: {
    args: FundMetadataArgs,
    result: FundMetadataResult,
    description: 'Fund facts that the data files state (name, inception date, shares outstanding, expense ratio...), each with its source file.',
  },
} as const;
export type ToolName = keyof typeof ToolPack;
export const ToolNames = Object.keys(ToolPack) as ToolName[];

// ---- record_effect (test tool, K5) -----------------------------------------------------------
/**
 * `record_effect`: a fault-injectable tool with an external effect, for tests only. It appends one
 * line (`<runId> <toolCallId> <tag>`) to the file the tools worker is configured with, then may
 * sleep, burn the CPU (blocking its thread), fail or hang as told. Granted only when
 * `RUNPLANE_TEST_TOOLS` names it; never in the default grant.
 */
export const RecordEffectArgs = z
  .object({
    tag: z.string().max(200).default(''),
    /** Wall time to wait after recording, ms. */
    sleepMs: z.number().int().min(0).max(600_000).optional(),
    /** With `sleepMs`: stop waiting as soon as this file exists (checked every 50 ms), so a test ends the call when it has seen what it waits for. */
    untilFile: z.string().min(1).max(4096).optional(),
    /** CPU time to burn (a busy loop, blocking its thread) after recording, ms. */
    burnMs: z.number().int().min(0).max(600_000).optional(),
    /** Fail (`injected_failure`) after recording. */
    fail: z.boolean().optional(),
    /** Never return. */
    hang: z.boolean().optional(),
  })
  .strict();
export const RecordEffectResult = z.object({ recorded: z.string() });

/** Tools that exist only for tests, granted only when configured (`RUNPLANE_TEST_TOOLS`). */
export const TestToolPack = {
  record_effect: {
    args: RecordEffectArgs,
    result: RecordEffectResult,
    description: 'Test tool: records one external effect (a line in a file), then sleeps, burns CPU, fails or hangs as told.',
  },
} as const;
export type TestToolName = keyof typeof TestToolPack;
export const TestToolNames = Object.keys(TestToolPack) as TestToolName[];

// ---- parking tools (K10): the Run waits for a human or a child Run ---------------------------
/** A question for a human (`ask_human`) or a sub-agent (`spawn_subagent`): one non-blank text. */
export const ParkingToolArgs = z
  .object({
    question: z
      .string()
      .max(4_000, 'question is at most 4000 characters')
      .refine((s) => s.trim().length > 0, 'question must not be blank'),
  })
  .strict();

/**
 * Tools that park or end the Run instead of executing anything: the runtime turns such a call
 * into a durable wait (`wait.opened`, `ask_human`), a child Run (`child.run.requested`,
 * `spawn_subagent`) or a clarification that ends the Run (`clarification.requested`,
 * `ask_clarification`, K2), never a `tool.call.proposed`, so the tools service never sees them.
 * Offered to the model only when in the Run's grant; a child Run's grant never holds them (no
 * grandchildren, no questions to the user from a sub-agent).
 */
export const ParkingToolPack = {
  ask_human: {
    args: ParkingToolArgs,
    description:
      'Ask the user a question and wait for the answer (the Run pauses until it is answered or the question expires). Use only when the question cannot be answered from the data.',
  },
  spawn_subagent: {
    args: ParkingToolArgs,
    description:
      "Hand a self-contained research question to a sub-agent (a child Run with part of this Run's remaining budget) and wait for its answer.",
  },
  ask_clarification: {
    args: ParkingToolArgs,
    description:
      'Ask the user to clarify the question before researching it (which fund, which period, which measure). This ends the Run: the question is published as its answer, and the reply starts a new Run. Use only when the question cannot be researched as asked.',
  },
} as const;
export type ParkingToolName = keyof typeof ParkingToolPack;
export const ParkingToolNames = Object.keys(ParkingToolPack) as ParkingToolName[];
/**
 * The key of an external effect (K3, K5): the tool's name and its arguments in a canonical form
 * (parsed JSON with object keys sorted; the raw text when it is not JSON), hashed (sha256 hex).
 * Two calls with the same key ask for the same effect, however their arguments were spaced.
 */
export function effectKey(name: string, argumentsText: string): string {
  let canonical: string;
  try {
    canonical = JSON.stringify(sortKeys(JSON.parse(argumentsText === '' ? '{}' : argumentsText)));
  } catch {
    canonical = argumentsText;
  }
  return createHash('sha256').update(`${name}\n${canonical}`).digest('hex');
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
    );
  return v;
}

/** True when `name` is a parking tool. */
export function isParkingTool(name: string): name is ParkingToolName {
  return (ParkingToolNames as string[]).includes(name);
}

/**
 * What a tool does to the world, recorded on its receipt for operators: `read-only` tools only
 * read; `external-effect` tools change something outside the Run's log. The label never makes an
 * `unknown` call eligible for automatic replay (K5): no call is ever replayed.
 */
export const ToolEffect = z.enum(['read-only', 'external-effect']);
export type ToolEffect = z.infer<typeof ToolEffect>;
export const ToolEffects: Record<ToolName | TestToolName, ToolEffect> = {
  list_funds: 'read-only',
  get_holdings: 'read-only',
  compare_holdings: 'read-only',
  fund_metadata: 'read-only',
  record_effect: 'external-effect',
};

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
    /** For an `unknown` call: what an operator later found at the destination (never a success by itself). */
    reconciliation: z
      .object({ outcome: z.enum(['succeeded', 'failed', 'not_executed']), evidence: z.string(), by: z.string(), at: z.string() })
      .optional(),
    /** For an `unknown` call: the outcome that arrived after it was recorded unknown. */
    lateObservation: z.object({ status: z.enum(['succeeded', 'failed']), at: z.string() }).optional(),
  }),
]);
export type ToolMessageContent = z.infer<typeof ToolMessageContent>;
