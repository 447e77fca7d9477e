/**
 * @runplane/holdings: the fund-research tool pack's pure logic. Parses issuer holdings files
 * (SSGA xlsx; iShares, Invesco and ARK csv), classifies cash and other non-security lines, and
 * answers the contract's tools (list_funds, get_holdings, compare_holdings, fund_metadata).
 *
 * Units: weights are percentages of the fund as the files state them (7.15 = 7.15 %); dates are
 * `YYYY-MM-DD` read from inside the files, `null` = undated.
 */
export { ToolFailure, isToolFailure, type ToolFailureCode } from './errors.js';
export { resolveDataFolder, findRepoRoot, sharedDataDir, SAMPLE_DIR, type DataFolder, type DataSet } from './data-folder.js';
export { InspectionStore, codeVersionOf, holdingsCodeVersion, privateStoreFolder, unsafeStoreFolder } from './inspection-store.js';
export { HoldingsLibrary, inspectFile, pickPair, type CompareHoldingsInput, type GetHoldingsInput, type Inspection } from './library.js';
export { executeTool, isToolName } from './tools.js';
export {
  parseHoldingsFile,
  parseHoldingsCsvText,
  parseSsgaWorkbook,
  sniffCsvFormat,
  fundFromFileName,
  isZip,
  sha256Of,
  unknownLayoutReason,
} from './parse.js';
export { compareFiles, summarise, holdingsResult, securitiesOf, provenanceOf, TOP_HOLDINGS, type MatchMethod } from './compare.js';
export { identifierKind, cusipOf, marketOf, tickerKey, nameKey, type Market } from './identity.js';
export { classifyIsharesLine, classifyLineByName } from './classify.js';
export { isOverviewTable, parseOverviewTable, parseFactSheet, type FactSheet, type OverviewTable } from './facts.js';
export {
  normaliseTicker,
  parseNumberText,
  parseStatedDate,
  readNumberCell,
  parseDayMonYear,
  parseMonthDayYear,
  parseUsDate,
  daysBetween,
  isoDate,
} from './values.js';
export type { ParsedHoldingsFile, ParsedLine, LineKind, FileFact } from './types.js';
