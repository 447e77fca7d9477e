/**
 * Locating the holdings table inside a text or spreadsheet file: header detection by column names,
 * and the rule that the table ends at the first blank row (iShares: a line holding a single
 * non-breaking space) or at the first row that no longer has the header's shape (ARK's quoted
 * disclaimer paragraph).
 */
import { parse } from 'csv-parse/sync';

/** Column roles a holdings table may carry. */
export type ColumnRole =
  | 'ticker'
  | 'name'
  | 'cusip'
  | 'isin'
  | 'sedol'
  | 'weight'
  | 'sector'
  | 'shares'
  | 'marketValue'
  | 'price'
  | 'assetClass'
  | 'location'
  | 'exchange'
  | 'fund'
  | 'date'
  | 'classOfShares';

/** Header aliases (lower-case, single-spaced) per role, for one issuer format. */
export type HeaderSpec = { required: ColumnRole[]; aliases: Partial<Record<ColumnRole, string[]>> };

/** Column index per role found in a header row. */
export type ColumnMap = Partial<Record<ColumnRole, number>>;

/** Lower-cases a header cell and collapses whitespace (NBSP included), dropping a leading BOM. */
export function normaliseHeaderCell(cell: string): string {
  return cell
    .replace(/^\uFEFF/, '')
    .replace(/\s+/g, ' ')
    .trim()
    .toLowerCase();
}

/**
 * Maps a candidate header row to column roles; returns `null` unless every required role is
 * present. Aliases are matched against the normalised header cell text.
 */
function matchHeader(cells: readonly string[], spec: HeaderSpec): ColumnMap | null {
  const map = mapColumns(cells, spec);
  return spec.required.every((role) => map[role] !== undefined) ? map : null;
}

/** Every role of `spec` found in a row of header cells (required or not). */
export function mapColumns(cells: readonly string[], spec: HeaderSpec): ColumnMap {
  const normalised = cells.map(normaliseHeaderCell);
  const map: ColumnMap = {};
  for (const [role, names] of Object.entries(spec.aliases) as [ColumnRole, string[]][]) {
    const index = normalised.findIndex((cell) => names.includes(cell));
    if (index >= 0) map[role] = index;
  }
  return map;
}

/** True when every cell is empty after trimming (a single NBSP counts as empty). */
function isBlankRow(cells: readonly string[]): boolean {
  return cells.every((cell) => cell.trim() === '');
}

/** One CSV record: its cells and the 1-based line of the file it ends on. */
export interface CsvRow {
  cells: string[];
  line: number;
}

/**
 * Parses CSV text into rows of strings with csv-parse, tolerating a UTF-8 BOM, ragged rows
 * (preambles and footers have fewer columns than the table) and stray quotes in footers.
 * `toLine` limits parsing to the first lines (for sniffing).
 */
export function parseCsvRows(text: string, toLine?: number): CsvRow[] {
  const records = parse(text, {
    bom: true,
    info: true,
    relax_column_count: true,
    relax_quotes: true,
    skip_empty_lines: false,
    skip_records_with_error: true,
    ...(toLine !== undefined ? { to_line: toLine } : {}),
  }) as unknown as { record: string[]; info: { lines: number } }[];
  return records.map(({ record, info }) => ({ cells: record, line: info.lines }));
}

/** Where a table sits in a list of rows: its header row index, column map and data-row indexes. */
export interface TableSlice {
  headerIndex: number;
  columns: ColumnMap;
  /** Indexes (into the rows array) of the table's data rows. */
  rowIndexes: number[];
}

/**
 * Finds the first row matching `spec` within the first `searchRows` rows and the data rows under
 * it: rows up to (not including) the first blank row, or the first row with fewer cells than the
 * header's highest required column (a footer paragraph). Returns `null` when no header is found.
 */
export function sliceTable(rows: readonly (readonly string[])[], spec: HeaderSpec, searchRows = 40): TableSlice | null {
  const limit = Math.min(rows.length, searchRows);
  for (let i = 0; i < limit; i++) {
    const columns = matchHeader(rows[i]!, spec);
    if (!columns) continue;
    const minCells = Math.max(...spec.required.map((role) => columns[role]!)) + 1;
    const rowIndexes: number[] = [];
    for (let j = i + 1; j < rows.length; j++) {
      const row = rows[j]!;
      if (isBlankRow(row) || row.length < minCells) break;
      rowIndexes.push(j);
    }
    return { headerIndex: i, columns, rowIndexes };
  }
  return null;
}

/** The trimmed cell of `row` for `role`, or `''` when the column is absent. */
export function cell(row: readonly string[], columns: ColumnMap, role: ColumnRole): string {
  const index = columns[role];
  return index === undefined ? '' : (row[index] ?? '').trim();
}
