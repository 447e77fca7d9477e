// The cost goals for W1 (docs/performance.md "Goals"), as rows the bench prints under its W1
// table: Runplane's figure, the best peer's (or the raw append's) with its name, the goal, the
// ratio Runplane / reference and whether the goal is met.
import { num } from './stats.js';

/** Idle RSS goal per Runplane service process, MiB. */
export const IDLE_RSS_GOAL_MIB = 100;
const PEERS = ['dbos', 'restate'];
const PEER_LABEL = { dbos: 'DBOS', restate: 'Restate' };
const NOT_RUN = 'n/a (peers not run)';

/**
 * The goal rows of one bench run.
 * @param {object} o
 * @param {Record<string, any>} o.results per system: `{ levels: [{ c, runsPerS, p50, cpuMsPerRun }], idleRss: [name, KiB][], eventsPerRun }`
 * @param {number[]} o.levels the concurrency levels run
 * @param {{ cpuUs: number } | null} o.raw the raw conditional append of the same run (CPU µs per append)
 * @param {{ c: number, perEventUs: number } | null} o.perEvent Runplane's CPU µs per event and the level it is from
 * @returns {{ rows: string[][], header: string[], over: string[] } | null} table cells (strings) and the
 *   services over the idle RSS goal ("runtime 120 MiB"); null when Runplane was not measured.
 */
export function goalRows({ results, levels, raw, perEvent }) {
  const rp = results.runplane;
  if (!rp?.levels) return null;
  const peers = PEERS.filter((s) => results[s]?.levels);
  const at = (r, c) => r?.levels?.[levels.indexOf(c)];
  const rows = [];
  /**
   * A row comparing Runplane with the best peer at level `c`: `better` picks the best peer value
   * (max or min), `factor` is the goal as a multiple of it, `higherIsBetter` says which way is met.
   */
  const peerRow = (title, c, get, digits, { higherIsBetter, factor, unit }) => {
    const goal = higherIsBetter ? '>= best peer' : `<= ${factor}x best peer`;
    if (!levels.includes(c)) return rows.push([title, `n/a (c=${c} not run)`, '', goal, 'n/a', 'n/a']);
    const v = get(at(rp, c));
    if (peers.length === 0) return rows.push([title, num(v, digits), NOT_RUN, goal, NOT_RUN, NOT_RUN]);
    const vals = peers.map((s) => [s, get(at(results[s], c))]).filter(([, x]) => Number.isFinite(x));
    if (vals.length === 0) return rows.push([title, num(v, digits), 'n/a (no peer figure)', goal, 'n/a', 'n/a']);
    const [best, bv] = vals.reduce((b, x) => ((higherIsBetter ? x[1] > b[1] : x[1] < b[1]) ? x : b));
    const r = v / bv;
    const target = bv * factor;
    rows.push([
      title,
      num(v, digits),
      `${num(bv, digits)} (${PEER_LABEL[best]})`,
      `${higherIsBetter ? '>=' : '<='} ${num(target, digits)}${unit} (${goal})`,
      `${num(r, 2)}x`,
      (higherIsBetter ? v >= target : v <= target) ? 'yes' : 'no',
    ]);
  };
  peerRow('Runs/s, c=64', 64, (l) => l?.runsPerS, 2, { higherIsBetter: true, factor: 1, unit: '' });
  peerRow('CPU ms per Run, c=64', 64, (l) => l?.cpuMsPerRun, 1, { higherIsBetter: false, factor: 1.5, unit: ' ms' });
  peerRow('p50 ms start-to-result, c=1', 1, (l) => l?.p50, 0, { higherIsBetter: false, factor: 2, unit: ' ms' });

  // Control-plane CPU per event against a raw conditional append on the same server, same run.
  const evTitle = `control-plane CPU us per event${perEvent ? `, c=${perEvent.c}` : ''}`;
  if (perEvent && raw) {
    const r = perEvent.perEventUs / raw.cpuUs;
    rows.push([
      evTitle,
      num(perEvent.perEventUs, 0),
      `${num(raw.cpuUs, 1)} (raw conditional append, same server)`,
      `<= ${num(3 * raw.cpuUs, 0)} us (<= 3x raw append)`,
      `${num(r, 2)}x`,
      r <= 3 ? 'yes' : 'no',
    ]);
  } else rows.push([evTitle, 'n/a', 'n/a (raw append not measured)', '<= 3x raw append', 'n/a', 'n/a']);

  // Idle RSS per service (the nats-server is not a service; it is shown on its own line).
  const services = (rp.idleRss ?? []).filter(([n]) => n !== 'nats-server' && n !== undefined);
  const mib = (k) => (k ?? NaN) / 1024;
  const over = services.filter(([, k]) => mib(k) > IDLE_RSS_GOAL_MIB).map(([n, k]) => `${n} ${num(mib(k), 0)} MiB`);
  let peerCell = NOT_RUN;
  const peerMax = peers
    .filter((s) => results[s]?.idleRss?.length)
    .map((s) => {
      const [n, k] = results[s].idleRss.reduce((b, x) => ((x[1] ?? 0) > (b[1] ?? 0) ? x : b));
      return [s, n, mib(k)];
    });
  if (peerMax.length) {
    const [s, n, m] = peerMax.reduce((b, x) => (x[2] < b[2] ? x : b));
    peerCell = `${num(m, 0)} (${PEER_LABEL[s]}, largest process ${n})`;
  }
  if (services.length) {
    const [maxName, maxK] = services.reduce((b, x) => ((x[1] ?? 0) > (b[1] ?? 0) ? x : b));
    rows.push([
      'idle RSS per service, MiB (largest)',
      `${num(mib(maxK), 0)} (${maxName})`,
      peerCell,
      `<= ${IDLE_RSS_GOAL_MIB} each`,
      `${num(mib(maxK) / IDLE_RSS_GOAL_MIB, 2)}x`,
      over.length ? `no (${over.length} of ${services.length} over)` : 'yes',
    ]);
  } else rows.push(['idle RSS per service, MiB (largest)', 'n/a', peerCell, `<= ${IDLE_RSS_GOAL_MIB} each`, 'n/a', 'n/a']);

  return { header: ['Cost goal, W1', 'Runplane', 'best peer (which)', 'goal', 'ratio', 'met'], rows, over };
}

/** A markdown-style table with the first column left-aligned and the others right-aligned. */
export function formatTable(header, rows) {
  const all = [header, ...rows];
  const widths = header.map((_, j) => Math.max(...all.map((r) => String(r[j] ?? '').length)));
  const line = (r) => '| ' + r.map((c, j) => (j === 0 ? String(c ?? '').padEnd(widths[j]) : String(c ?? '').padStart(widths[j]))).join(' | ') + ' |';
  return [line(header), '|' + widths.map((w, j) => (j === 0 ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|') + '|', ...rows.map(line)].join(
    '\n',
  );
}
