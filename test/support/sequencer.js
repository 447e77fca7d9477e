// Jest test sequencer (jest.config.js `testSequencer`): the longest files start first, so that no
// worker is left running a long file alone at the end of the run. Jest's own sequencer orders by
// the durations it cached on earlier runs of this machine, and by file size when it has none (a
// fresh clone, as in CI), which put the 95-120 s `loaded-liveness` file (5.5 KB) among the last to
// start. This one uses the cached duration when there is one and otherwise the duration checked in
// `test/support/test-costs.json` (seconds per file, written by `node scripts/test-costs.js` from a
// Jest `--json` result). A file in neither (a new one) still goes first, as in Jest's sequencer.
// Plain JavaScript: Jest loads it before any transform applies.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import Sequencer from '@jest/test-sequencer';

const costsFile = new URL('./test-costs.json', import.meta.url);
const root = fileURLToPath(new URL('../..', import.meta.url));

/** Seconds per file path relative to the repository (test-costs.json `files`); empty when the file is unreadable. */
function checkedInCosts() {
  try {
    return JSON.parse(readFileSync(costsFile, 'utf8')).files ?? {};
  } catch {
    return {};
  }
}

export default class LongestFirstSequencer extends Sequencer {
  costs = checkedInCosts();

  /** Milliseconds: Jest's cached duration of `test`, else the checked-in one, else undefined (runs first). */
  time(test) {
    const cached = super.time(test);
    if (cached !== undefined && cached !== null) return cached;
    const seconds = this.costs[relative(root, test.path)];
    return typeof seconds === 'number' ? seconds * 1000 : undefined;
  }
}
