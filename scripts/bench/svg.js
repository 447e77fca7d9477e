// A hand-written SVG line chart: Runs/s (y) against concurrency (x, one evenly spaced tick per level).

const COLORS = { Runplane: '#1f6feb', 'Runplane x3': '#8250df', DBOS: '#2da44e', Restate: '#d1242f' };
const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * @param {number[]} levels concurrency levels (x ticks)
 * @param {Array<{ name: string, values: Array<number|null> }>} series Runs/s per level (null = not measured)
 * @param {string} subtitle e.g. machine and date
 * @returns {string} an SVG document
 */
export function runsPerSecondSvg(levels, series, subtitle) {
  const W = 640,
    H = 400,
    L = 64,
    R = 150,
    T = 56,
    B = 56;
  const pw = W - L - R,
    ph = H - T - B;
  const max = Math.max(1, ...series.flatMap((s) => s.values.filter((v) => v !== null && Number.isFinite(v))));
  const step = niceStep(max / 5);
  const top = Math.ceil(max / step) * step;
  const x = (i) => L + (levels.length === 1 ? pw / 2 : (i * pw) / (levels.length - 1));
  const y = (v) => T + ph - (v / top) * ph;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${L}" y="22" font-size="15" font-weight="bold">W1 throughput: settled Runs/s by concurrency</text>`,
    `<text x="${L}" y="40" fill="#555">${esc(subtitle)}</text>`,
  ];
  for (let v = 0; v <= top + 1e-9; v += step) {
    out.push(`<line x1="${L}" x2="${L + pw}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${L - 8}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${+v.toFixed(2)}</text>`);
  }
  levels.forEach((c, i) => out.push(`<text x="${x(i).toFixed(1)}" y="${T + ph + 20}" text-anchor="middle">${c}</text>`));
  out.push(`<text x="${L + pw / 2}" y="${H - 12}" text-anchor="middle">concurrent Runs (closed loop)</text>`);
  out.push(`<text transform="translate(18 ${T + ph / 2}) rotate(-90)" text-anchor="middle">settled Runs/s</text>`);
  out.push(
    `<line x1="${L}" x2="${L}" y1="${T}" y2="${T + ph}" stroke="#333"/><line x1="${L}" x2="${L + pw}" y1="${T + ph}" y2="${T + ph}" stroke="#333"/>`,
  );
  series.forEach((s, k) => {
    const color = COLORS[s.name] ?? '#666';
    const pts = s.values.map((v, i) => (v === null || !Number.isFinite(v) ? null : [x(i), y(v)])).filter(Boolean);
    if (pts.length > 1)
      out.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2.5" points="${pts.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ')}"/>`,
      );
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) return;
      out.push(`<circle cx="${x(i).toFixed(1)}" cy="${y(v).toFixed(1)}" r="4" fill="${color}"/>`);
      out.push(`<text x="${(x(i) + 6).toFixed(1)}" y="${(y(v) - 6).toFixed(1)}" fill="${color}" font-size="11">${v.toFixed(1)}</text>`);
    });
    const ly = T + 10 + k * 22;
    out.push(`<line x1="${L + pw + 20}" x2="${L + pw + 44}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2.5"/>`);
    out.push(`<text x="${L + pw + 50}" y="${ly + 4}">${esc(s.name)}${s.values.every((v) => v === null) ? ' (not run)' : ''}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
