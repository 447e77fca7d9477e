/**
 * Inspections kept on disk (`InspectionStore`): a library with a store keeps what each file turned
 * out to be, a library of another thread or process answers from it instead of parsing, and
 * nothing else is read back: not an entry of other bytes, of other code, an unreadable entry, or a
 * folder someone else may write.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  codeVersionOf,
  HoldingsLibrary,
  holdingsCodeVersion,
  inspectFile,
  InspectionStore,
  SAMPLE_DIR,
  sha256Of,
  unsafeStoreFolder,
  type Inspection,
} from '../src/index.js';

const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});
function tempDir(label: string): string {
  const dir = mkdtempSync(join(tmpdir(), `rp-inspections-${label}-`));
  made.push(dir);
  return dir;
}
/** A data folder holding a copy of the shipped sample. */
function sampleCopy(): string {
  const dir = tempDir('data');
  for (const name of readdirSync(SAMPLE_DIR)) copyFileSync(join(SAMPLE_DIR, name), join(dir, name));
  return dir;
}
/** An iShares-like file no other test of this file has: its bytes are new to this thread's memory cache. */
function uniqueFile(tag: string): string {
  return [
    `iShares Unique ${tag} ETF`,
    'Fund Holdings as of,"Jan 31, 2025"',
    'Inception Date,"Jan 01, 2020"',
    '',
    'Ticker,Name,Sector,Asset Class,Market Value,Weight (%),Notional Value,Quantity,Price,Location,Exchange,Currency,FX Rate,Market Currency,Accrual Date',
    `"AAPL","APPLE INC ${tag}","Information Technology","Equity","1,000.00","60.00","1,000.00","10.00","100.00","United States","NASDAQ","USD","1.00","USD","-"`,
    `"MSFT","MICROSOFT CORP ${tag}","Information Technology","Equity","666.00","40.00","666.00","2.00","333.00","United States","NASDAQ","USD","1.00","USD","-"`,
  ].join('\n');
}

describe('InspectionStore', () => {
  it('given a library with a store, when it inspects a folder, then each file is kept and reads back equal to a fresh parse', async () => {
    const data = sampleCopy();
    const dir = tempDir('store');
    const store = InspectionStore.open(dir, 'a'.repeat(64))!;
    await new HoldingsLibrary({ dir: data, dataSet: 'illustrative' }, store).inspectAll();
    const names = readdirSync(data).sort();
    expect(store.writes).toBe(names.length);
    const again = InspectionStore.open(dir, 'a'.repeat(64))!;
    for (const name of names) {
      const path = join(data, name);
      const kept = again.get(sha256Of(await readFile(path)), path, name);
      expect(kept).toEqual(await inspectFile(path, name));
    }
    expect(again.hits).toBe(names.length);
  });

  it('given an entry kept for a file, when a library that never saw those bytes reads the file, then it answers from the entry, not from a parse', async () => {
    const data = tempDir('planted');
    const name = 'IVV_2025-01-31.csv';
    writeFileSync(join(data, name), uniqueFile('planted'));
    const parsed = await inspectFile(join(data, name), name);
    if (parsed.kind !== 'holdings') throw new Error(`the fixture should parse as holdings: ${JSON.stringify(parsed)}`);
    const dir = tempDir('store');
    const store = InspectionStore.open(dir, 'b'.repeat(64))!;
    // what another thread kept: the same file, with a fund name no parse of these bytes gives
    store.put(parsed.parsed.sha256, join(data, name), name, { ...parsed, parsed: { ...parsed.parsed, fund: 'KEPT' } });
    const reader = InspectionStore.open(dir, 'b'.repeat(64))!;
    const listed = await new HoldingsLibrary({ dir: data, dataSet: 'shared' }, reader).listFunds();
    expect(listed.funds.map((f) => f.fund)).toEqual(['KEPT']);
    expect(reader.hits).toBe(1);
    expect(reader.writes).toBe(0);
  });

  it('given the file changed after an entry was kept, then the entry is not read: the new bytes are parsed', async () => {
    const data = tempDir('changed');
    const name = 'IVV_2025-01-31.csv';
    const path = join(data, name);
    writeFileSync(path, uniqueFile('before'));
    const before = await inspectFile(path, name);
    const dir = tempDir('store');
    InspectionStore.open(dir, 'c'.repeat(64))!.put(sha256Of(await readFile(path)), path, name, {
      kind: 'other',
      name,
      reason: 'kept for the old bytes',
    });
    writeFileSync(path, uniqueFile('after'));
    const reader = InspectionStore.open(dir, 'c'.repeat(64))!;
    const [seen] = await new HoldingsLibrary({ dir: data, dataSet: 'shared' }, reader).inspectAll();
    expect(seen!.kind).toBe('holdings');
    expect(seen).not.toEqual(before);
    expect(reader.hits).toBe(0);
    expect(reader.writes).toBe(1);
  });

  it('given an entry that cannot be read (a torn or garbage file), then get answers null and the library parses', async () => {
    const data = tempDir('garbage');
    const name = 'IVV_2025-01-31.csv';
    const path = join(data, name);
    writeFileSync(path, uniqueFile('garbage'));
    const dir = tempDir('store');
    const store = InspectionStore.open(dir, 'd'.repeat(64))!;
    const sha = sha256Of(await readFile(path));
    store.put(sha, path, name, { kind: 'other', name, reason: 'to be overwritten' });
    const [folder] = readdirSync(dir);
    const [entry] = readdirSync(join(dir, folder!));
    writeFileSync(join(dir, folder!, entry!), 'not a V8 serialization');
    expect(store.get(sha, path, name)).toBeNull();
    const [seen] = await new HoldingsLibrary({ dir: data, dataSet: 'shared' }, store).inspectAll();
    expect(seen!.kind).toBe('holdings');
  });

  it('given entries of another code version, then they are not read, and only the three most recently opened other versions are kept', async () => {
    const dir = tempDir('versions');
    const path = '/data/x.csv';
    const kept: Inspection = { kind: 'other', name: 'x.csv', reason: 'old code' };
    InspectionStore.open(dir, '1'.repeat(64))!.put('f'.repeat(64), path, 'x.csv', kept);
    expect(InspectionStore.open(dir, '1'.repeat(64))!.get('f'.repeat(64), path, 'x.csv')).toEqual(kept);
    expect(InspectionStore.open(dir, '2'.repeat(64))!.get('f'.repeat(64), path, 'x.csv')).toBeNull();
    const old = Date.now() / 1000 - 3600;
    for (const [i, v] of ['3', '4', '5'].entries()) {
      mkdirSync(join(dir, v.repeat(64)));
      utimesSync(join(dir, v.repeat(64)), old + i, old + i);
    }
    utimesSync(join(dir, '1'.repeat(64)), old - 10, old - 10); // the least recently used
    InspectionStore.open(dir, '6'.repeat(64));
    // by last change: 2 (made just now), 5, 4 kept; 3 and 1 removed
    expect(readdirSync(dir).sort()).toEqual(['2', '4', '5', '6'].map((v) => v.repeat(64)));
  });

  it('given a folder others may write, or a symbolic link, then the store is off and says why; the library still answers by parsing', async () => {
    const open = tempDir('open');
    chmodSync(open, 0o777);
    const reasons: string[] = [];
    expect(InspectionStore.open(open, 'e'.repeat(64), (r) => reasons.push(r))).toBeNull();
    expect(reasons[0]).toContain('others may use it (mode 777; 700 is needed)');
    const link = join(tempDir('link'), 'store');
    symlinkSync(tempDir('target'), link);
    expect(unsafeStoreFolder(link)).toContain('symbolic link');
    expect(InspectionStore.open('')).toBeNull();
    const listed = await new HoldingsLibrary({ dir: sampleCopy(), dataSet: 'illustrative' }, null).listFunds();
    expect(listed.funds.map((f) => f.fund)).toEqual(['AAA', 'BBB']);
  });

  it('given a folder owned by another user, or below a folder others may write that is not sticky, or named through a symbolic link with a trailing slash, then it is refused', () => {
    const own = tempDir('owner');
    expect(unsafeStoreFolder(own)).toBeNull();
    expect(unsafeStoreFolder(own, process.getuid!() + 1)).toContain(`it is owned by uid ${process.getuid!()}, not this process's`);
    const open = tempDir('parent');
    chmodSync(open, 0o777);
    mkdirSync(join(open, 'store'), { mode: 0o700 });
    expect(unsafeStoreFolder(join(open, 'store'))).toContain('others may rename it');
    chmodSync(open, 0o1777); // sticky, as /tmp: no one but the owner may rename what is in it
    expect(unsafeStoreFolder(join(open, 'store'))).toBeNull();
    const link = join(tempDir('link'), 'store');
    symlinkSync(tempDir('target'), link);
    expect(unsafeStoreFolder(`${link}/`)).toContain('symbolic link');
    // a linked folder above it is followed: this user's link to a private folder passes, a link to
    // an open, non-sticky folder does not
    const home = join(tempDir('home'), 'cache');
    symlinkSync(own, home);
    mkdirSync(join(home, 'store'), { mode: 0o700 });
    expect(unsafeStoreFolder(join(home, 'store'))).toBeNull();
    const openLink = join(tempDir('home'), 'open');
    chmodSync(open, 0o777);
    symlinkSync(open, openLink);
    expect(unsafeStoreFolder(join(openLink, 'store'))).toContain(`others may rename it: ${open} above it is writable by others and not sticky`);
  });

  it('given an entry with one byte changed, an entry of other bytes put in its place, a wrong shape, or a FIFO, then none is read (nothing blocks)', async () => {
    const data = tempDir('damaged');
    const name = 'IVV_2025-01-31.csv';
    const path = join(data, name);
    writeFileSync(path, uniqueFile('damaged'));
    const sha = sha256Of(await readFile(path));
    const good = await inspectFile(path, name);
    const dir = tempDir('store');
    const store = InspectionStore.open(dir, '7'.repeat(64))!;
    const folder = join(dir, '7'.repeat(64));
    const entryOf = () => readdirSync(folder).find((f) => !f.endsWith('.partial'))!;
    store.put(sha, path, name, good);
    expect(store.get(sha, path, name)).toEqual(good);
    const bytes = readFileSync(join(folder, entryOf()));
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 5) ^ 0x01, bytes.length - 5);
    writeFileSync(join(folder, entryOf()), bytes);
    expect(store.get(sha, path, name)).toBeNull();
    // the entry of another file's bytes, saved under this file's key (a checksum that holds)
    const other = { ...good, parsed: { ...(good as Extract<Inspection, { kind: 'holdings' }>).parsed, sha256: 'e'.repeat(64) } } as Inspection;
    store.put(sha, path, name, other);
    expect(store.get(sha, path, name)).toBeNull();
    store.put(sha, path, name, { kind: 'holdings', name } as unknown as Inspection);
    expect(store.get(sha, path, name)).toBeNull();
    const entry = join(folder, entryOf());
    rmSync(entry);
    execFileSync('mkfifo', [entry]);
    expect(store.get(sha, path, name)).toBeNull();
  });

  it('given the same bytes and name in two folders, then each has its own entry (its path is part of what it says)', async () => {
    const dir = tempDir('store');
    const store = InspectionStore.open(dir, '8'.repeat(64))!;
    const text = uniqueFile('two-paths');
    for (const label of ['one', 'two']) {
      const data = tempDir(label);
      writeFileSync(join(data, 'IVV_2025-01-31.csv'), text);
      store.put(
        sha256Of(Buffer.from(text)),
        join(data, 'IVV_2025-01-31.csv'),
        'IVV_2025-01-31.csv',
        await inspectFile(join(data, 'IVV_2025-01-31.csv'), 'IVV_2025-01-31.csv'),
      );
    }
    expect(readdirSync(join(dir, '8'.repeat(64)))).toHaveLength(2);
  });

  it("names the code by a sha256 of its files' contents and the parsers' versions, taken when the module loaded", () => {
    expect(holdingsCodeVersion()).toMatch(/^[0-9a-f]{64}$/);
    expect(holdingsCodeVersion()).toBe(holdingsCodeVersion());
    const code = join(tempDir('code'), 'parse.js');
    writeFileSync(code, 'export const x = 1;');
    const before = codeVersionOf([code]);
    expect(codeVersionOf([code])).toBe(before);
    writeFileSync(code, 'export const x = 2;');
    expect(codeVersionOf([code])).not.toBe(before);
  });
});
