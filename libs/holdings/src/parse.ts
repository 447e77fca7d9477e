/**
 * Parsing of issuer holdings files into {@link ParsedHoldingsFile}: SSGA `.xlsx` through exceljs,
 * iShares / Invesco / ARK `.csv` through csv-parse. The format is recognised by sniffing the
 * content (ZIP magic + sheet header, or a csv header row), not by the file extension.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import type ExcelJS from 'exceljs';
import type { AsOfHow, IssuerFormat, UnreadableValue } from '@runplane/contracts';
import { classifyIsharesLine, classifyLineByName } from './classify.js';
import { ToolFailure } from './errors.js';
import { CSV_FORMATS, ISSUER_NAMES, ROLE_WORDS, SSGA_HEADER } from './formats.js';
import { identifierKind } from './identity.js';
import { cell, mapColumns, normaliseHeaderCell, parseCsvRows, sliceTable, type ColumnMap, type HeaderSpec } from './table.js';
import type { FileFact, ParsedHoldingsFile, ParsedLine } from './types.js';
import { cleanText, parseNumberText, parseStatedDate, readNumberCell } from './values.js';

/** Lower-case hex sha256 of bytes (or of a text's UTF-8 bytes). */
export function sha256Of(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** An as-of date as established from a date line: read, unreadable (the line exists), or absent. */
function establishDate(
  text: string | null,
  how: 'preamble' | 'row-date-column',
  where: string,
): {
  asOf: string | null;
  asOfHow: AsOfHow;
  asOfText: string | null;
  asOfSource: string;
} {
  if (text === null) return { asOf: null, asOfHow: 'absent', asOfText: null, asOfSource: `no ${where}: the file states no date (undated)` };
  const asOf = parseStatedDate(text);
  if (asOf === null) {
    return {
      asOf: null,
      asOfHow: 'unreadable',
      asOfText: text,
      asOfSource: `${where} says "${text}", which cannot be read as a date (the file is not undated, and its name's date is not used)`,
    };
  }
  return { asOf, asOfHow: how, asOfText: text, asOfSource: `${where} "${text}"` };
}

/**
 * Identifier cells sorted by what they hold, judged by shape: a CUSIP-titled column holding ISINs
 * (some issuers' "Security Identifier") gives ISINs, and the reverse.
 */
function identifiers(cusipCell: string, isinCell: string, sedolCell: string): { cusip: string | null; isin: string | null; sedol: string | null } {
  const out = { cusip: null as string | null, isin: null as string | null, sedol: null as string | null };
  const cusipText = cleanText(cusipCell);
  if (cusipText !== null) {
    if (identifierKind(cusipText) === 'isin') out.isin = cusipText;
    else out.cusip = cusipText;
  }
  out.isin ??= cleanText(isinCell);
  out.sedol = cleanText(sedolCell);
  return out;
}

/** Reads the numeric cells of a row, collecting stated values that are not numbers (never taken as 0). */
function numbers(read: (role: 'weight' | 'shares' | 'marketValue' | 'price') => { text: string | number | null; present: boolean }) {
  const unreadable: UnreadableValue[] = [];
  const get = (role: 'weight' | 'shares' | 'marketValue' | 'price') => {
    const { text, present } = read(role);
    const value = readNumberCell(text, present);
    if (value.value === null && value.unreadable !== null) unreadable.push({ field: role, text: value.unreadable });
    return value.value;
  };
  return { weight: get('weight'), shares: get('shares'), marketValue: get('marketValue'), price: get('price'), unreadable };
}

/** True when the bytes start with the ZIP local-file magic `PK\x03\x04` (xlsx is a ZIP). */
export function isZip(bytes: Uint8Array): boolean {
  return bytes.length >= 4 && bytes[0] === 0x50 && bytes[1] === 0x4b && bytes[2] === 0x03 && bytes[3] === 0x04;
}

/**
 * The csv issuer layout of `text` (looking for a header row among its first 40 lines), or `null`
 * when the text is not an iShares, Invesco or ARK holdings file.
 */
export function sniffCsvFormat(text: string): Exclude<IssuerFormat, 'ssga-xlsx'> | null {
  const rows = parseCsvRows(text, 40).map((row) => row.cells);
  for (const { format, header } of CSV_FORMATS) {
    if (sliceTable(rows, header)) return format;
  }
  return null;
}

/**
 * Reads and parses one holdings file.
 *
 * @param path file path (any extension: the layout is sniffed from the content).
 * @returns every table row (securities and classified non-security lines; weights in percent as
 *   stated), the issuer format, the fund ticker (from inside the file; iShares: the file-name
 *   prefix before `_`), the as-of date read from inside the file (`YYYY-MM-DD`, `null` = undated)
 *   and the preamble facts.
 * @throws ToolFailure `unreadable_file` when the file cannot be read or is not a holdings file of a
 *   known issuer layout.
 */
export async function parseHoldingsFile(path: string): Promise<ParsedHoldingsFile> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (cause) {
    throw new ToolFailure('unreadable_file', `Cannot read ${basename(path)}: ${(cause as Error).message}`, { cause });
  }
  if (isZip(bytes)) return parseSsgaWorkbook(bytes, path);
  return parseHoldingsCsvText(bytes.toString('utf8'), path, sha256Of(bytes));
}

// ---- csv layouts -------------------------------------------------------------------------------

/**
 * Parses the text of an iShares, Invesco or ARK csv holdings file (BOM, preamble, blank lines and
 * footer disclaimers tolerated). `path` names the file (its base name supplies the iShares fund).
 *
 * @throws ToolFailure `unreadable_file` when no known header row is found.
 */
export function parseHoldingsCsvText(text: string, path: string, sha256: string = sha256Of(text)): ParsedHoldingsFile {
  const parsed = parseCsvLayouts(text, path);
  return { ...parsed, sha256 };
}

function parseCsvLayouts(text: string, path: string): Omit<ParsedHoldingsFile, 'sha256'> {
  const rows = parseCsvRows(text);
  const cells = rows.map((row) => row.cells);
  for (const { format, header } of CSV_FORMATS) {
    const table = sliceTable(cells, header);
    if (!table) continue;
    const preamble = cells.slice(0, table.headerIndex);
    const dataRows = table.rowIndexes.map((i) => ({ cells: cells[i]!, line: rows[i]!.line }));
    switch (format) {
      case 'ishares-csv':
        return buildIshares(path, preamble, dataRows, table.columns);
      case 'invesco-csv':
      case 'ark-csv':
        return buildPerRowDated(format, path, dataRows, table.columns);
    }
  }
  throw new ToolFailure('unreadable_file', unknownLayoutReason(basename(path), cells, CSV_FORMATS));
}

/**
 * Why a file is in no known layout, in the user's words: the row that comes closest to a known
 * holdings header and the columns it lacks, or that no row looks like a holdings header.
 */
export function unknownLayoutReason(
  file: string,
  rows: readonly (readonly string[])[],
  formats: readonly { format: IssuerFormat; header: HeaderSpec }[],
): string {
  let best: { row: number; format: IssuerFormat; found: number; missing: string[] } | null = null;
  rows.slice(0, 40).forEach((cells, row) => {
    for (const { format, header } of formats) {
      const map = mapColumns(cells, header);
      const found = header.required.filter((role) => map[role] !== undefined).length;
      if (found >= 2 && (best === null || found > best.found)) {
        best = { row, format, found, missing: header.required.filter((role) => map[role] === undefined) };
      }
    }
  });
  const known = 'SPDR (State Street) xlsx, iShares, Invesco or ARK csv';
  if (best === null) {
    return `${file} is not a holdings file in a layout this research can read (${known}): none of its first 40 rows names the columns of a holdings table (a ticker or security name column and a weight column).`;
  }
  const b = best as { row: number; format: IssuerFormat; found: number; missing: string[] };
  return `${file} is not a holdings file in a layout this research can read: row ${b.row + 1} looks like the header of an ${ISSUER_NAMES[b.format]} file but lacks ${b.missing.map((role) => ROLE_WORDS[role] ?? role).join(' and ')}.`;
}

type DataRow = { cells: string[]; line: number };

/** Fund ticker from a file name: the prefix before the first `_` (else before the extension), upper-case. */
export function fundFromFileName(path: string): string {
  const name = basename(path);
  const prefix = name.includes('_') ? name.slice(0, name.indexOf('_')) : name.replace(/\.[^.]*$/, '');
  return prefix.trim().toUpperCase();
}

/** iShares: preamble of `key,"value"` lines (first line = fund name), `Asset Class` drives classification. */
function buildIshares(path: string, preamble: string[][], dataRows: DataRow[], columns: ColumnMap): Omit<ParsedHoldingsFile, 'sha256'> {
  const facts: FileFact[] = [];
  let fundName: string | null = null;
  let asOfText: string | null = null;
  let dateLine = false;
  preamble.forEach((row, index) => {
    const filled = row.map((c) => c.trim()).filter((c) => c !== '');
    if (filled.length === 0) return;
    if (index === 0 && filled.length === 1) {
      fundName = filled[0]!;
      facts.push({ field: 'Fund Name', value: fundName });
      return;
    }
    const key = (row[0] ?? '').trim();
    const isDateLine = normaliseHeaderCell(key) === 'fund holdings as of';
    if (isDateLine) {
      dateLine = true;
      asOfText = (row[1] ?? '').trim();
    }
    const value = cleanText(row[1]);
    if (key === '' || value === null) return;
    facts.push({ field: key, value });
  });
  const date = dateLine
    ? establishDate(asOfText ?? '', 'preamble', 'the "Fund Holdings as of" line')
    : establishDate(null, 'preamble', '"Fund Holdings as of" line');
  const lines = dataRows.map(({ cells, line }): ParsedLine => {
    const name = cell(cells, columns, 'name');
    const sector = cleanText(cell(cells, columns, 'sector'));
    const assetClass = cleanText(cell(cells, columns, 'assetClass'));
    const ids = identifiers(cell(cells, columns, 'cusip'), cell(cells, columns, 'isin'), cell(cells, columns, 'sedol'));
    const values = numbers((role) => ({ text: cell(cells, columns, role), present: columns[role] !== undefined }));
    return {
      ticker: cleanText(cell(cells, columns, 'ticker')),
      name,
      ...ids,
      weight: values.weight,
      kind: classifyIsharesLine(assetClass, sector, name),
      sector,
      shares: values.shares,
      marketValue: values.marketValue,
      assetClass,
      location: cleanText(cell(cells, columns, 'location')),
      exchange: cleanText(cell(cells, columns, 'exchange')),
      unreadable: values.unreadable,
      sourceRow: line,
    };
  });
  return {
    path,
    file: basename(path),
    issuerFormat: 'ishares-csv',
    fund: fundFromFileName(path),
    fundSource: 'file-name',
    ...date,
    fundName,
    preambleFacts: facts,
    lines,
    hasCusips: columns.cusip !== undefined,
    hasIsins: columns.isin !== undefined,
    hasSedols: columns.sedol !== undefined,
  };
}

/** Invesco and ARK: no preamble; fund and date repeated on every row (date as MM/DD/YYYY). */
function buildPerRowDated(
  format: 'invesco-csv' | 'ark-csv',
  path: string,
  dataRows: DataRow[],
  columns: ColumnMap,
): Omit<ParsedHoldingsFile, 'sha256'> {
  const lines = dataRows.map(({ cells, line }): ParsedLine => {
    const ticker = cleanText(cell(cells, columns, 'ticker'));
    const ids = identifiers(cell(cells, columns, 'cusip'), cell(cells, columns, 'isin'), cell(cells, columns, 'sedol'));
    const name = cell(cells, columns, 'name');
    const values = numbers((role) => ({ text: cell(cells, columns, role), present: columns[role] !== undefined }));
    return {
      ticker,
      name,
      ...ids,
      weight: values.weight,
      kind: classifyLineByName(ticker, ids.cusip ?? ids.isin, name, cleanText(cell(cells, columns, 'classOfShares'))),
      sector: cleanText(cell(cells, columns, 'sector')),
      shares: values.shares,
      marketValue: values.marketValue,
      assetClass: null,
      location: null,
      exchange: null,
      unreadable: values.unreadable,
      sourceRow: line,
    };
  });
  // The first stated date cell decides: a readable one dates the file; stated but unreadable
  // ones make the date unreadable (never replaced by the file name's date).
  const dateCells = dataRows.map(({ cells }) => cell(cells, columns, 'date')).filter((d) => d !== '');
  const dateText = dateCells.find((d) => parseStatedDate(d) !== null) ?? dateCells[0] ?? null;
  const fundInside = dataRows.map(({ cells }) => cleanText(cell(cells, columns, 'fund'))).find((f) => f !== null) ?? null;
  const dateColumn = format === 'ark-csv' ? 'date' : 'Date';
  return {
    path,
    file: basename(path),
    issuerFormat: format,
    fund: (fundInside ?? fundFromFileName(path)).toUpperCase(),
    fundSource: fundInside ? 'inside-file' : 'file-name',
    ...establishDate(dateText, 'row-date-column', `the per-row ${dateColumn} column`),
    fundName: null,
    preambleFacts: [],
    lines,
    hasCusips: columns.cusip !== undefined,
    hasIsins: columns.isin !== undefined || lines.some((l) => l.isin !== null),
    hasSedols: columns.sedol !== undefined,
  };
}

// ---- SSGA xlsx ---------------------------------------------------------------------------------

/**
 * exceljs (with its zip, stream and csv writers, ~170 modules, ~20 MiB of resident memory), loaded
 * when the first workbook is parsed rather than by every process that imports this package (the
 * CLI, the devstack, a tools worker that has not opened an xlsx yet).
 */
let excel: Promise<typeof ExcelJS> | null = null;
function loadExcelJs(): Promise<typeof ExcelJS> {
  excel ??= import('exceljs').then((m) => m.default);
  return excel;
}

/** Text of an exceljs cell value (strings, numbers, dates, rich text, hyperlinks, formula results). */
function cellValueText(value: ExcelJS.CellValue | undefined): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (value instanceof Date) return value.toISOString().slice(0, 10);
  if (typeof value === 'object') {
    if ('richText' in value && Array.isArray(value.richText)) return value.richText.map((part) => part.text).join('');
    if ('text' in value && typeof value.text === 'string') return value.text;
    if ('result' in value) return cellValueText(value.result);
  }
  return '';
}

/** Numeric value of an exceljs cell (numbers as-is, text through {@link parseNumberText}). */
function cellValueNumber(value: ExcelJS.CellValue | undefined): number | null {
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (value && typeof value === 'object' && 'result' in value) return cellValueNumber(value.result);
  return parseNumberText(cellValueText(value));
}

/**
 * Parses an SSGA (SPDR) holdings workbook: sheet `holdings` (else the first sheet), preamble
 * `Fund Name:` / `Ticker Symbol:` / `Holdings: As of 30-Sep-2025`, header row, table up to the
 * first blank row, then disclaimers (ignored).
 *
 * @throws ToolFailure `unreadable_file` when the workbook cannot be loaded or has no holdings header.
 */
export async function parseSsgaWorkbook(bytes: Buffer, path: string): Promise<ParsedHoldingsFile> {
  const { Workbook } = await loadExcelJs();
  const workbook = new Workbook();
  try {
    await workbook.xlsx.load(bytes as unknown as ArrayBuffer);
  } catch (cause) {
    throw new ToolFailure('unreadable_file', `${basename(path)} is not a readable xlsx workbook: ${(cause as Error).message}`, { cause });
  }
  const sheet = workbook.getWorksheet('holdings') ?? workbook.worksheets[0];
  if (!sheet) throw new ToolFailure('unreadable_file', `${basename(path)} has no worksheet.`);
  const values: ExcelJS.CellValue[][] = [];
  for (let r = 1; r <= sheet.rowCount; r++) {
    const raw = sheet.getRow(r).values;
    // exceljs rows are 1-based sparse arrays; shift to 0-based dense cells.
    const row = Array.isArray(raw) ? Array.from({ length: Math.max(raw.length - 1, 0) }, (_, c) => raw[c + 1] ?? null) : [];
    values.push(row);
  }
  const texts = values.map((row) => row.map((v) => cellValueText(v)));
  const table = sliceTable(texts, SSGA_HEADER);
  if (!table) throw new ToolFailure('unreadable_file', unknownLayoutReason(basename(path), texts, [{ format: 'ssga-xlsx', header: SSGA_HEADER }]));
  const facts: FileFact[] = [];
  let fundName: string | null = null;
  let fundInside: string | null = null;
  let asOfText: string | null = null;
  for (const row of texts.slice(0, table.headerIndex)) {
    const key = (row[0] ?? '').trim().replace(/:$/, '');
    const value = cleanText(row[1]);
    const k = normaliseHeaderCell(key);
    // The date line: `Holdings:` | `As of 30-Sep-2025` (any cell saying "As of ...").
    if (asOfText === null && (k === 'holdings' || /^as of\b/i.test(value ?? '') || /^as of\b/i.test(key))) {
      asOfText = [key.match(/^as of\b/i) ? key : '', row[1] ?? ''].join(' ').trim();
    }
    if (key === '' || value === null) continue;
    facts.push({ field: key, value });
    if (k === 'fund name') fundName = value;
    else if (k === 'ticker symbol') fundInside = value.toUpperCase();
  }
  const columns = table.columns;
  const lines = table.rowIndexes.map((i): ParsedLine => {
    const text = texts[i]!;
    const raw = values[i]!;
    const ticker = cleanText(cell(text, columns, 'ticker'));
    const ids = identifiers(cell(text, columns, 'cusip'), cell(text, columns, 'isin'), cell(text, columns, 'sedol'));
    const name = cell(text, columns, 'name');
    const nums = numbers((role) => {
      const index = role === 'weight' || role === 'shares' ? columns[role] : undefined;
      if (index === undefined) return { text: null, present: false };
      return { text: cellValueNumber(raw[index]) ?? cellValueText(raw[index]), present: true };
    });
    return {
      ticker,
      name,
      ...ids,
      weight: nums.weight,
      kind: classifyLineByName(ticker, ids.cusip ?? ids.isin, name),
      sector: cleanText(cell(text, columns, 'sector')),
      shares: nums.shares,
      marketValue: null,
      assetClass: null,
      location: null,
      exchange: null,
      unreadable: nums.unreadable,
      sourceRow: i + 1,
    };
  });
  return {
    path,
    file: basename(path),
    sha256: sha256Of(bytes),
    issuerFormat: 'ssga-xlsx',
    fund: fundInside ?? fundFromFileName(path),
    fundSource: fundInside ? 'inside-file' : 'file-name',
    ...establishDate(asOfText, 'preamble', 'the preamble\'s "Holdings: As of" line'),
    fundName,
    preambleFacts: facts,
    lines,
    hasCusips: columns.cusip !== undefined,
    hasIsins: columns.isin !== undefined || lines.some((l) => l.isin !== null),
    hasSedols: columns.sedol !== undefined,
  };
}
