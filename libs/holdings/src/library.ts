/**
 * {@link HoldingsLibrary}: the fund-research tools over one data folder, with every file read and
 * parsed at most once (re-read only when its size or modification time changes).
 */
import { readdirSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type {
  CompareHoldingsResult,
  FileSelection,
  FundMetadataResult,
  GetHoldingsResult,
  HoldingsFileInfo,
  ListFundsResult,
  Provenance,
} from '@runplane/contracts';
import { compareFiles, holdingsResult, provenanceOf, TOP_HOLDINGS } from './compare.js';
import type { DataFolder, DataSet } from './data-folder.js';
import { ToolFailure } from './errors.js';
import type { InspectionStore } from './inspection-store.js';
import { isOverviewTable, parseFactSheet, parseOverviewTable, type FactSheet, type OverviewTable } from './facts.js';
import { isZip, parseHoldingsCsvText, parseSsgaWorkbook, sha256Of, sniffCsvFormat } from './parse.js';
import type { ParsedHoldingsFile } from './types.js';
import { daysBetween } from './values.js';

/** What a file in the data folder turned out to be. */
export type Inspection =
  | { kind: 'holdings'; name: string; parsed: ParsedHoldingsFile }
  | { kind: 'overview'; name: string; sha256: string; table: OverviewTable }
  | { kind: 'factsheet'; name: string; sha256: string; sheet: FactSheet }
  | { kind: 'other'; name: string; reason: string };

/** Files larger than this are listed as other files without being read. */
const MAX_FILE_BYTES = 64 * 1024 * 1024;

/**
 * Reads one file of the data folder and decides what it is by its content: an issuer holdings
 * file (parsed), the ETF overview table, a fund fact sheet, or something else (with the reason).
 * Never throws for a bad file; only an unreadable file becomes `other`.
 */
export function inspectFile(path: string, name: string): Promise<Inspection> {
  return readAndInspect(path, name, inspectBytes);
}

/** Reads `path` and hands its bytes to `inspect`; an unreadable file is `other`, with the reason. */
async function readAndInspect(
  path: string,
  name: string,
  inspect: (bytes: Buffer, path: string, name: string) => Promise<Inspection>,
): Promise<Inspection> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (error) {
    return { kind: 'other', name, reason: `unreadable: ${(error as Error).message}` };
  }
  return inspect(bytes, path, name);
}

/**
 * Parsed files by content digest (sha256 of the bytes) and name: the same bytes are parsed once
 * per process or worker thread, whatever their path or modification time. Bounded (oldest dropped).
 */
const byDigest = new Map<string, Promise<Inspection>>();
const BY_DIGEST_LIMIT = 256;

/**
 * {@link inspectFile}, answered from the content-digest cache when the same bytes were inspected
 * before, else from `store` (inspections kept on disk by another thread or process), else parsed
 * and kept in both.
 */
export function inspectFileCached(path: string, name: string, store: InspectionStore | null = null): Promise<Inspection> {
  return readAndInspect(path, name, (bytes) => inspectBytesCached(bytes, path, name, store));
}

function inspectBytesCached(bytes: Buffer, path: string, name: string, store: InspectionStore | null): Promise<Inspection> {
  const sha256 = sha256Of(bytes);
  const key = `${sha256}:${name}`;
  const hit = byDigest.get(key);
  if (hit) return hit;
  const kept = store?.get(sha256, path, name);
  const inspection = kept
    ? Promise.resolve(kept)
    : inspectBytesOnce(bytes, path, name).then(({ inspection: parsed, lasting }) => {
        // an unexpected error (exceljs not loading, a bug) may not happen again: not kept for others
        if (lasting) store?.put(sha256, path, name, parsed);
        return parsed;
      });
  byDigest.set(key, inspection);
  while (byDigest.size > BY_DIGEST_LIMIT) byDigest.delete(byDigest.keys().next().value!);
  return inspection;
}

async function inspectBytes(bytes: Buffer, path: string, name: string): Promise<Inspection> {
  return (await inspectBytesOnce(bytes, path, name)).inspection;
}

/**
 * What the bytes are, and whether that holds for as long as the bytes and the code do (`lasting`):
 * false when an unexpected error (not the parsers' own `ToolFailure`) made the file `other`.
 */
async function inspectBytesOnce(bytes: Buffer, path: string, name: string): Promise<{ inspection: Inspection; lasting: boolean }> {
  const sha256 = sha256Of(bytes);
  try {
    if (isZip(bytes)) return { inspection: { kind: 'holdings', name, parsed: await parseSsgaWorkbook(bytes, path) }, lasting: true };
    const text = bytes.toString('utf8');
    if (sniffCsvFormat(text) !== null)
      return { inspection: { kind: 'holdings', name, parsed: parseHoldingsCsvText(text, path, sha256) }, lasting: true };
    if (isOverviewTable(text)) return { inspection: { kind: 'overview', name, sha256, table: parseOverviewTable(text) }, lasting: true };
    const sheet = parseFactSheet(text);
    if (sheet) return { inspection: { kind: 'factsheet', name, sha256, sheet }, lasting: true };
    // Not a known kind: the csv parser's reason says which holdings columns are missing.
    parseHoldingsCsvText(text, path, sha256);
    return { inspection: { kind: 'other', name, reason: 'not a holdings file, overview table or fact sheet' }, lasting: true };
  } catch (error) {
    return { inspection: { kind: 'other', name, reason: (error as Error).message }, lasting: error instanceof ToolFailure };
  }
}

/** What a fact sheet or overview table read by `fund_metadata` was, for its provenance. */
function sourceProvenance(inspection: Extract<Inspection, { kind: 'factsheet' | 'overview' }>): Provenance {
  if (inspection.kind === 'overview') {
    return { file: inspection.name, sha256: inspection.sha256, layout: 'overview-csv', asOf: null, asOfHow: 'absent', asOfText: null };
  }
  const { sheet } = inspection;
  return {
    file: inspection.name,
    sha256: inspection.sha256,
    layout: 'fact-sheet-md',
    asOf: sheet.asOf,
    asOfHow: sheet.asOfText === null ? 'absent' : sheet.asOf === null ? 'unreadable' : 'fact-sheet-line',
    asOfText: sheet.asOfText,
  };
}

/** Arguments of {@link HoldingsLibrary.getHoldings} (`fund` is matched case-insensitively). */
export interface GetHoldingsInput {
  fund: string;
  /** `YYYY-MM-DD`; absent = the latest dated file. */
  asOf?: string | undefined;
  /** How many of the heaviest securities to list (default 25). */
  top?: number | undefined;
}

/** Arguments of {@link HoldingsLibrary.compareHoldings}. */
export interface CompareHoldingsInput {
  fundA: string;
  fundB: string;
  asOfA?: string | undefined;
  asOfB?: string | undefined;
}

/** Files ordered by as-of date (oldest first, undated last), then by name. */
function byDateThenName(x: ParsedHoldingsFile, y: ParsedHoldingsFile): number {
  if (x.asOf !== y.asOf) {
    if (x.asOf === null) return 1;
    if (y.asOf === null) return -1;
    return x.asOf < y.asOf ? -1 : 1;
  }
  return x.file < y.file ? -1 : x.file > y.file ? 1 : 0;
}

/**
 * The latest dated file; a fund's only file when it has one file and no readable date. Between
 * several files none of which states a readable date there is no newest: the file names' dates are
 * never used (they are not verified), so this refuses rather than let the names decide.
 * `files` must be sorted by {@link byDateThenName}.
 *
 * @throws ToolFailure `no_readable_date` when the fund has 2+ files and none states a readable date.
 */
function latest(files: readonly ParsedHoldingsFile[]): ParsedHoldingsFile {
  const dated = files.filter((f) => f.asOf !== null);
  if (dated.length > 0) return dated[dated.length - 1]!;
  if (files.length === 1) return files[0]!;
  throw noReadableDate(files);
}

/**
 * Picks one file per fund from the candidate files of each side: the pair with the fewest days
 * between their as-of dates (ties: the later pair, i.e. the larger later date, then the larger
 * earlier date). `compareHoldings` narrows a side to the file(s) of a requested date first, so a
 * given date on one side yields the closest file on the other. When no dated pair exists, each
 * side's latest file is used.
 */
export function pickPair(filesA: readonly ParsedHoldingsFile[], filesB: readonly ParsedHoldingsFile[]): [ParsedHoldingsFile, ParsedHoldingsFile] {
  let best: { a: ParsedHoldingsFile; b: ParsedHoldingsFile; days: number; later: string; earlier: string } | null = null;
  for (const a of filesA) {
    for (const b of filesB) {
      if (a.asOf === null || b.asOf === null) continue;
      const days = daysBetween(a.asOf, b.asOf);
      const [earlier, later] = a.asOf < b.asOf ? [a.asOf, b.asOf] : [b.asOf, a.asOf];
      const better =
        best === null || days < best.days || (days === best.days && (later > best.later || (later === best.later && earlier > best.earlier)));
      if (better) best = { a, b, days, later, earlier };
    }
  }
  return best ? [best.a, best.b] : [latest(filesA), latest(filesB)];
}

/**
 * The fund-research tools over one data folder. Methods return the contract result shapes
 * (weights in percent as the files state them, dates `YYYY-MM-DD` or `null` = undated) and throw
 * {@link ToolFailure} (`unknown_fund`, `no_file_for_date`, `no_readable_date`, `unreadable_file`).
 */
export class HoldingsLibrary {
  readonly dir: string;
  readonly dataSet: DataSet;
  private readonly cache = new Map<string, { stamp: string; inspection: Promise<Inspection> }>();

  /**
   * @param store where inspections are kept on disk for other threads and processes
   *   ({@link InspectionStore}); null: parsed in this thread (once per content, kept in memory).
   */
  constructor(
    folder: DataFolder,
    private readonly store: InspectionStore | null = null,
  ) {
    this.dir = folder.dir;
    this.dataSet = folder.dataSet;
  }

  /**
   * Every visible file of the folder, inspected (cached per path, size and modification time),
   * in file-name order.
   *
   * The folder is listed and each file's size and time read synchronously, on every call: the
   * library runs on a tool thread (apps/tools `tool-worker.ts`), where a blocking call holds up
   * nothing else, and for the 20 shared files a synchronous check took 90-100 µs of CPU against
   * 330-540 µs through `fs/promises` (docs/performance.md). A changed file is still seen on the next call.
   *
   * @throws ToolFailure `unreadable_file` when the folder itself cannot be listed.
   */
  async inspectAll(): Promise<Inspection[]> {
    let names: string[];
    try {
      const entries = readdirSync(this.dir, { withFileTypes: true });
      names = entries.filter((e) => !e.name.startsWith('.') && (e.isFile() || e.isSymbolicLink())).map((e) => e.name);
    } catch (cause) {
      throw new ToolFailure('unreadable_file', `Cannot read the data folder ${this.dir}: ${(cause as Error).message}`, { cause });
    }
    names.sort();
    const inspections = await Promise.all(names.map((name) => this.inspect(name)));
    return inspections.filter((i): i is Inspection => i !== null);
  }

  private async inspect(name: string): Promise<Inspection | null> {
    const path = join(this.dir, name);
    let info;
    try {
      info = statSync(path);
    } catch {
      return null; // vanished or dangling link
    }
    if (!info.isFile()) return null;
    if (info.size > MAX_FILE_BYTES) return { kind: 'other', name, reason: 'too large to inspect' };
    const stamp = `${info.size}:${info.mtimeMs}`;
    const cached = this.cache.get(path);
    if (cached && cached.stamp === stamp) return cached.inspection;
    const inspection = inspectFileCached(path, name, this.store);
    this.cache.set(path, { stamp, inspection });
    return inspection;
  }

  /** Every parsed holdings file of the folder, ordered by fund, then as-of date (undated last), then name. */
  async holdingsFiles(): Promise<ParsedHoldingsFile[]> {
    const files = (await this.inspectAll()).flatMap((i) => (i.kind === 'holdings' ? [i.parsed] : []));
    return files.sort((x, y) => (x.fund !== y.fund ? (x.fund < y.fund ? -1 : 1) : byDateThenName(x, y)));
  }

  /**
   * `list_funds`: the funds with holdings files (each file with its issuer format and as-of date
   * read from inside it) and the names of the other files in the folder.
   */
  async listFunds(): Promise<ListFundsResult> {
    const inspections = await this.inspectAll();
    const funds = new Map<string, HoldingsFileInfo[]>();
    for (const file of await this.holdingsFiles()) {
      const info: HoldingsFileInfo = {
        fund: file.fund,
        file: file.file,
        issuerFormat: file.issuerFormat,
        asOf: file.asOf,
        provenance: provenanceOf(file),
      };
      funds.set(file.fund, [...(funds.get(file.fund) ?? []), info]);
    }
    return {
      dataSet: this.dataSet,
      funds: [...funds].map(([fund, files]) => ({ fund, files })),
      otherFiles: inspections.filter((i) => i.kind !== 'holdings').map((i) => i.name),
      otherFileNotes: inspections.flatMap((i): ListFundsResult['otherFileNotes'] => {
        if (i.kind === 'factsheet') return [{ file: i.name, kind: 'fact-sheet', reason: `a fact sheet of ${i.sheet.fund}` }];
        if (i.kind === 'overview') return [{ file: i.name, kind: 'overview-table', reason: 'a table of fund overview figures (no date inside)' }];
        if (i.kind === 'other') return [{ file: i.name, kind: 'not-holdings', reason: i.reason }];
        return [];
      }),
    };
  }

  /**
   * The holdings files of one fund, oldest first (undated last).
   *
   * @throws ToolFailure `unknown_fund` when the folder has no holdings file for the fund.
   */
  async filesOf(fund: string): Promise<ParsedHoldingsFile[]> {
    const ticker = fund.trim().toUpperCase();
    const all = await this.holdingsFiles();
    const files = all.filter((f) => f.fund === ticker);
    if (files.length > 0) return files;
    const covered = [...new Set(all.map((f) => f.fund))];
    const mentions = (await this.inspectAll())
      .filter((i) => i.kind !== 'holdings' && (i.kind === 'factsheet' ? i.sheet.fund === ticker : i.name.toUpperCase().startsWith(`${ticker}_`)))
      // A reason that already names its file is not prefixed with the name again.
      .map((i) => (i.kind === 'other' ? (i.reason.startsWith(i.name) ? i.reason : `${i.name}: ${i.reason}`).replace(/\.$/, '') : i.name));
    const hint =
      mentions.length > 0
        ? ` ${ticker} appears only in files that are not holdings files (${mentions.join('; ')}); its fund facts may still be stated there.`
        : '';
    throw new ToolFailure(
      'unknown_fund',
      `Fund ${ticker} is not covered by the data folder: it has holdings files for ${covered.join(', ') || 'no fund'}.${hint}`,
    );
  }

  /**
   * One file of a fund: the one with as-of date `asOf`, or the latest dated file when absent.
   *
   * @throws ToolFailure `unknown_fund`, or `no_file_for_date` when no file of the fund has that date.
   */
  async fileOf(fund: string, asOf?: string): Promise<ParsedHoldingsFile> {
    return (await this.selectFile(fund, asOf)).file;
  }

  /** {@link fileOf} with why that file: the requested date, or the newest. */
  private async selectFile(fund: string, asOf?: string): Promise<{ file: ParsedHoldingsFile; selection: FileSelection }> {
    const files = await this.filesOf(fund);
    if (asOf === undefined) {
      const file = latest(files);
      return { file, selection: { rule: 'newest', detail: newestDetail(file, files) } };
    }
    const match = files.find((f) => f.asOf === asOf);
    if (match) return { file: match, selection: { rule: 'requested-date', requested: asOf, detail: `the file dated ${asOf}, as requested` } };
    throw noFileForDate(files, asOf);
  }

  /**
   * `get_holdings`: summary (security count, non-security lines, weight sums in percent) and the
   * 25 heaviest securities of one fund's file (`asOf` = that file's date; absent = latest).
   *
   * @throws ToolFailure `unknown_fund` | `no_file_for_date` | `no_readable_date` (no date given, several files, none dated).
   */
  async getHoldings(args: GetHoldingsInput): Promise<GetHoldingsResult> {
    const { file, selection } = await this.selectFile(args.fund, args.asOf);
    return holdingsResult(file, selection, args.top ?? TOP_HOLDINGS);
  }

  /**
   * `compare_holdings`: securities in common (matched one to one, strongest key first: CUSIP,
   * ISIN, SEDOL, the ticker on the same market, the normalised company name; docs/fund-research.md
   * "Matching securities"), names held by only one fund, the weight (percent, as stated) of
   * each fund held by the other, and the days between the two as-of dates. Without dates the pair
   * of files with the closest as-of dates is used (ties: the later pair).
   *
   * @throws ToolFailure `unknown_fund` | `no_file_for_date` | `no_readable_date` (no date given, several files, none dated).
   */
  async compareHoldings(args: CompareHoldingsInput): Promise<CompareHoldingsResult> {
    const candidates = async (fund: string, asOf: string | undefined) => {
      const files = await this.filesOf(fund);
      if (asOf === undefined) return files;
      const dated = files.filter((f) => f.asOf === asOf);
      if (dated.length === 0) throw noFileForDate(files, asOf);
      return dated;
    };
    const filesA = await candidates(args.fundA, args.asOfA);
    const filesB = await candidates(args.fundB, args.asOfB);
    const requested = (asOf: string): FileSelection => ({ rule: 'requested-date', requested: asOf, detail: `the file dated ${asOf}, as requested` });
    if (args.fundA.trim().toUpperCase() === args.fundB.trim().toUpperCase() && (args.asOfA === undefined || args.asOfB === undefined)) {
      // One fund at two dates: a date not given means the newest other file (none given: the two newest).
      const all = filesA;
      let a = args.asOfA !== undefined ? filesA[0] : undefined;
      let b = args.asOfB !== undefined ? filesB[0] : undefined;
      const newestBesides = (f: ParsedHoldingsFile | undefined) => {
        const others = all.filter((x) => x !== f);
        return others.length > 0 ? latest(others) : (f ?? latest(all));
      };
      if (a === undefined && b === undefined) {
        b = latest(all);
        a = newestBesides(b);
      } else if (a === undefined) a = newestBesides(b);
      else b = newestBesides(a);
      const newest = (f: ParsedHoldingsFile): FileSelection => ({ rule: 'newest', detail: newestDetail(f, all) });
      return compareFiles(a, b!, args.asOfA ? requested(args.asOfA) : newest(a), args.asOfB ? requested(args.asOfB) : newest(b!));
    }
    const [a, b] = pickPair(filesA, filesB);
    const closest = (own: ParsedHoldingsFile, other: ParsedHoldingsFile): FileSelection => ({
      rule: 'closest-dates',
      detail:
        own.asOf !== null && other.asOf !== null
          ? `of the two funds' files, the pair with the closest as-of dates (${daysBetween(own.asOf, other.asOf)} days apart)`
          : 'the newest file (no dated pair of files to compare by date)',
    });
    return compareFiles(a, b, args.asOfA ? requested(args.asOfA) : closest(a, b), args.asOfB ? requested(args.asOfB) : closest(b, a));
  }

  /**
   * `fund_metadata`: facts the files state about a fund, each with its source file and that file's
   * as-of date (`null` for the undated overview table): holdings-file preambles (SSGA fund name;
   * iShares fund name, inception date, shares outstanding), the ETF overview row (assets $M,
   * expense ratio %, number of holdings...) and fact sheets (benchmark, expense ratio, inception).
   * Holdings-file facts come newest file first, and a fact several files state identically is
   * given once (from the newest file).
   *
   * @throws ToolFailure `unknown_fund` when no file has anything about the fund.
   */
  async fundMetadata(args: { fund: string }): Promise<FundMetadataResult> {
    const fund = args.fund.trim().toUpperCase();
    const inspections = await this.inspectAll();
    const facts: FundMetadataResult['facts'] = [];
    const sources: Provenance[] = [];
    let covered = false;
    // Newest file first; a fact stated identically by several files is kept once, from the newest.
    const seen = new Set<string>();
    for (const file of (await this.holdingsFiles()).filter((f) => f.fund === fund).reverse()) {
      covered = true;
      sources.push(provenanceOf(file));
      for (const fact of file.preambleFacts) {
        const key = JSON.stringify([fact.field, fact.value]);
        if (seen.has(key)) continue;
        seen.add(key);
        facts.push({ ...fact, source: file.file, asOf: file.asOf });
      }
    }
    for (const inspection of inspections) {
      if (inspection.kind === 'factsheet' && inspection.sheet.fund === fund) {
        covered = true;
        sources.push(sourceProvenance(inspection));
        for (const fact of inspection.sheet.facts) facts.push({ ...fact, source: inspection.name, asOf: inspection.sheet.asOf });
      } else if (inspection.kind === 'overview') {
        const row = inspection.table.get(fund);
        if (!row) continue;
        covered = true;
        sources.push(sourceProvenance(inspection));
        for (const fact of row) facts.push({ ...fact, source: inspection.name, asOf: null });
      }
    }
    if (!covered) {
      const holdingsFunds = [...new Set((await this.holdingsFiles()).map((f) => f.fund))];
      const sheets = inspections.flatMap((i) => (i.kind === 'factsheet' ? [i.sheet.fund] : []));
      const overview = inspections.some((i) => i.kind === 'overview');
      throw new ToolFailure(
        'unknown_fund',
        `Fund ${fund} is not covered by the data folder: it has holdings files for ${holdingsFunds.join(', ') || 'no fund'}` +
          (sheets.length > 0 ? `, fact sheets for ${[...new Set(sheets)].sort().join(', ')}` : '') +
          (overview ? `, and no overview-table row for ${fund}` : '') +
          '.',
      );
    }
    return { fund, facts, sources };
  }
}

/** Why the newest file: `the newest of 3 files (2024-12-06, 2025-11-18...)`, or the only one. */
function newestDetail(file: ParsedHoldingsFile, files: readonly ParsedHoldingsFile[]): string {
  if (files.length <= 1) return 'the only file of the fund';
  return `the newest of ${files.length} files of the fund`;
}

/** Why a fund's undated files cannot be told apart: each file with its unreadable date line, or "states no date". */
function noReadableDate(files: readonly ParsedHoldingsFile[]): ToolFailure {
  const fund = files[0]?.fund ?? '?';
  const each = files.map((f) => `${f.file} ${f.asOfHow === 'unreadable' ? `("${f.asOfText ?? ''}" is not a readable date)` : '(states no date)'}`);
  return new ToolFailure(
    'no_readable_date',
    `Fund ${fund} has ${files.length} holdings files and none states a readable date (${each.join('; ')}), so none can be chosen as the newest; the dates in file names are not used.`,
  );
}

function noFileForDate(files: readonly ParsedHoldingsFile[], asOf: string): ToolFailure {
  const fund = files[0]?.fund ?? '?';
  const dates = files.filter((f) => f.asOf !== null).map((f) => f.asOf!);
  const undated = files.filter((f) => f.asOf === null).map((f) => f.file);
  const parts = [
    dates.length > 0 ? `its files are as of ${dates.join(', ')}` : null,
    undated.length > 0 ? `${undated.join(', ')} ${undated.length === 1 ? 'states' : 'state'} no readable date` : null,
  ].filter((x): x is string => x !== null);
  return new ToolFailure('no_file_for_date', `Fund ${fund} has no holdings file as of ${asOf}; ${parts.join('; ')}.`);
}
