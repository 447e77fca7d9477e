/** Test fixture: a holdings library over a fresh temporary folder holding the given files. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HoldingsLibrary } from '../src/index.js';

/** A `shared` holdings library over a new folder `<tmp>/holdings-<label>-XXXXXX` with `files` (name: text) in it. */
export function libraryOf(label: string, files: Record<string, string>): HoldingsLibrary {
  const dir = mkdtempSync(join(tmpdir(), `holdings-${label}-`));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return new HoldingsLibrary({ dir, dataSet: 'shared' });
}
