/**
 * Parsing of issuer holdings files into {@link ParsedHoldingsFile}: SSGA `.xlsx` through exceljs,
 * iShares / Invesco / ARK `.csv` through csv-parse. The format is recognised by sniffing the
 * content (ZIP magic + sheet header, or a csv header row), not by the file extension.
 */
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import type ExcelJS from 'exceljs';
import type { IssuerFormat } from '@runplane/contracts';
import { classifyIsharesLine, classifyLineByName } from './classify.js';
import { ToolFailure } from './errors.js';
import { CSV_FORMATS, SSGA_HEADER } from './formats.js';
import { cell, normaliseHeaderCell, parseCsvRows, sliceTable, type ColumnMap } from './table.js';
import type { FileFact, ParsedHoldingsFile, ParsedLine } from './types.js';
import { cleanText, parseDayMonYear, parseMonthDayYear, parseNumberText, parseUsDate } from './values.js';

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
  return parseHoldingsCsvText(bytes.toString('utf8'), path);
}

// ---- csv layouts -------------------------------------------------------------------------------

/**
 * Parses the text of an iShares, Invesco or ARK csv holdings file (BOM, preamble, blank lines and
 * footer disclaimers tolerated). `path` names the file (its base name supplies the iShares fund).
 *
 * @throws ToolFailure `unreadable_file` when no known header row is found.
 */
export function parseHoldingsCsvText(text: string, path: string): ParsedHoldingsFile {
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
  throw new ToolFailure('unreadable_file', `${basename(path)} is not a holdings file of a known issuer layout (SSGA, iShares, Invesco, ARK).`);
}

type DataRow = { cells: string[]; line: number };

/** Fund ticker from a file name: the prefix before the first `_` (else before the extension), upper-case. */
export function fundFromFileName(path: string): string {
  const name = basename(path);
  const prefix = name.includes('_') ? name.slice(0, name.indexOf('_')) : name.replace(/\.[^.]*$/, '');
  return prefix.trim().toUpperCase();
}

/** iShares: preamble of `key,"value"` lines (first line = fund name), `Asset Class` drives classification. */
function buildIshares(path: string, preamble: string[][], dataRows: DataRow[], columns: ColumnMap): ParsedHoldingsFile {
  const facts: FileFact[] = [];
  let fundName: string | null = null;
  let asOfText: string | null = null;
  preamble.forEach((row, index) => {
    const filled = row.map((c) => c.trim()).filter((c) => c !== '');
    if (filled.length === 0) return;
    if (index === 0 && filled.length === 1) {
      fundName = filled[0]!;
      facts.push({ field: 'Fund Name', value: fundName });
      return;
    }
    const key = (row[0] ?? '').trim();
    const value = cleanText(row[1]);
    if (key === '' || value === null) return;
    facts.push({ field: key, value });
    if (normaliseHeaderCell(key) === 'fund holdings as of') asOfText = value;
  });
  const asOf = parseMonthDayYear(asOfText);
  const lines = dataRows.map(({ cells, line }): ParsedLine => {
    const name = cell(cells, columns, 'name');
    const sector = cleanText(cell(cells, columns, 'sector'));
    const assetClass = cleanText(cell(cells, columns, 'assetClass'));
    return {
      ticker: cleanText(cell(cells, columns, 'ticker')),
      name,
      cusip: null,
      weight: parseNumberText(cell(cells, columns, 'weight')) ?? 0,
      kind: classifyIsharesLine(assetClass, sector, name),
      sector,
      shares: parseNumberText(cell(cells, columns, 'shares')),
      marketValue: parseNumberText(cell(cells, columns, 'marketValue')),
      assetClass,
      sourceRow: line,
    };
  });
  return {
    path,
    file: basename(path),
    issuerFormat: 'ishares-csv',
    fund: fundFromFileName(path),
    fundSource: 'file-name',
    asOf,
    asOfSource: asOf ? `preamble "Fund Holdings as of,${asOfText}"` : 'no "Fund Holdings as of" line: undated',
    fundName,
    preambleFacts: facts,
    lines,
    hasCusips: false,
  };
}

/** Invesco and ARK: no preamble; fund and date repeated on every row (date as MM/DD/YYYY). */
function buildPerRowDated(format: 'invesco-csv' | 'ark-csv', path: string, dataRows: DataRow[], columns: ColumnMap): ParsedHoldingsFile {
  const lines = dataRows.map(({ cells, line }): ParsedLine => {
    const ticker = cleanText(cell(cells, columns, 'ticker'));
    const cusip = cleanText(cell(cells, columns, 'cusip'));
    const name = cell(cells, columns, 'name');
    return {
      ticker,
      name,
      cusip,
      weight: parseNumberText(cell(cells, columns, 'weight')) ?? 0,
      kind: classifyLineByName(ticker, cusip, name, cleanText(cell(cells, columns, 'classOfShares'))),
      sector: cleanText(cell(cells, columns, 'sector')),
      shares: parseNumberText(cell(cells, columns, 'shares')),
      marketValue: parseNumberText(cell(cells, columns, 'marketValue')),
      assetClass: null,
      sourceRow: line,
    };
  });
  const dateText = dataRows.map(({ cells }) => cell(cells, columns, 'date')).find((d) => parseUsDate(d) !== null) ?? null;
  const asOf = parseUsDate(dateText);
  const fundInside = dataRows.map(({ cells }) => cleanText(cell(cells, columns, 'fund'))).find((f) => f !== null) ?? null;
  const dateColumn = format === 'ark-csv' ? 'date' : 'Date';
  return {
    path,
    file: basename(path),
    issuerFormat: format,
    fund: (fundInside ?? fundFromFileName(path)).toUpperCase(),
    fundSource: fundInside ? 'inside-file' : 'file-name',
    asOf,
    asOfSource: asOf ? `per-row ${dateColumn} column ${dateText}` : `no ${dateColumn} column value: undated`,
    fundName: null,
    preambleFacts: [],
    lines,
    hasCusips: columns.cusip !== undefined,
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
  if (!table) {
    throw new ToolFailure(
      'unreadable_file',
      `${basename(path)} is an xlsx workbook without an SSGA holdings table (Name, Ticker, Identifier, Weight).`,
    );
  }
  const facts: FileFact[] = [];
  let fundName: string | null = null;
  let fundInside: string | null = null;
  let asOfText: string | null = null;
  for (const row of texts.slice(0, table.headerIndex)) {
    const key = (row[0] ?? '').trim().replace(/:$/, '');
    const value = cleanText(row[1]);
    if (key === '' || value === null) continue;
    facts.push({ field: key, value });
    const k = normaliseHeaderCell(key);
    if (k === 'fund name') fundName = value;
    else if (k === 'ticker symbol') fundInside = value.toUpperCase();
    else if (parseDayMonYear(value) && asOfText === null) asOfText = value;
  }
  const columns = table.columns;
  const lines = table.rowIndexes.map((i): ParsedLine => {
    const text = texts[i]!;
    const raw = values[i]!;
    const ticker = cleanText(cell(text, columns, 'ticker'));
    const cusip = cleanText(cell(text, columns, 'cusip'));
    const name = cell(text, columns, 'name');
    return {
      ticker,
      name,
      cusip,
      weight: cellValueNumber(raw[columns.weight!]) ?? 0,
      kind: classifyLineByName(ticker, cusip, name),
      sector: cleanText(cell(text, columns, 'sector')),
      shares: columns.shares === undefined ? null : cellValueNumber(raw[columns.shares]),
      marketValue: null,
      assetClass: null,
      sourceRow: i + 1,
    };
  });
  const asOf = parseDayMonYear(asOfText);
  return {
    path,
    file: basename(path),
    issuerFormat: 'ssga-xlsx',
    fund: fundInside ?? fundFromFileName(path),
    fundSource: fundInside ? 'inside-file' : 'file-name',
    asOf,
    asOfSource: asOf ? `preamble "${asOfText}"` : 'no "As of" date in the preamble: undated',
    fundName,
    preambleFacts: facts,
    lines,
    hasCusips: true,
  };
}
