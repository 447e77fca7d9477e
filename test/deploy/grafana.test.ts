/**
 * The Grafana dashboard cannot go stale: `deploy/grafana/runplane-dashboard.json` parses with the
 * fields Grafana needs to import it, its panels are exactly the query sections of docs/metrics.md
 * (same titles, same PromQL, same order), every query parses as PromQL (the Prometheus project's
 * own grammar), and every metric named by the dashboard or the docs page is registered by the code
 * (the services' registry, libs/service-kit). Then the checks are shown failing on planted faults.
 */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parser } from '@prometheus-io/lezer-promql';
import { repoRoot } from '@runplane/devstack';
import { metricsRegistry } from '@runplane/service-kit';

const repo = repoRoot();
const DASHBOARD = 'deploy/grafana/runplane-dashboard.json';
const DOCS = 'docs/metrics.md';

interface Target {
  refId?: unknown;
  expr?: unknown;
  datasource?: unknown;
}
interface Panel {
  id?: unknown;
  type?: unknown;
  title?: unknown;
  gridPos?: { h?: unknown; w?: unknown; x?: unknown; y?: unknown };
  datasource?: unknown;
  targets?: Target[];
}
interface Dashboard {
  uid?: unknown;
  title?: unknown;
  schemaVersion?: unknown;
  panels?: Panel[];
  templating?: { list?: { name?: unknown; type?: unknown; query?: unknown }[] };
}

/** The panels docs/metrics.md describes: each `### ` heading under "Queries" with its ```promql block, one query a line. */
function docsPanels(markdown: string): { title: string; exprs: string[] }[] {
  const queries = markdown.split('\n## Queries\n')[1]?.split('\n## ')[0] ?? '';
  return [...queries.matchAll(/^### (.+)\n[\s\S]*?```promql\n([\s\S]*?)```/gm)].map((m) => ({
    title: m[1]!.trim(),
    exprs: m[2]!.split('\n').filter((l) => l.trim() !== ''),
  }));
}

/** Metric names a PromQL query selects; throws on a query that does not parse. */
function metricsOf(expr: string): string[] {
  const names: string[] = [];
  let error = false;
  parser.parse(expr).iterate({
    enter: (n) => {
      if (n.type.isError) error = true;
      if (n.name === 'Identifier' && n.node.parent?.name === 'VectorSelector') names.push(expr.slice(n.from, n.to));
    },
  });
  if (error) throw new Error(`not PromQL: ${expr}`);
  return names;
}

/** The registered metric a series name belongs to (a histogram's `_bucket`, `_count`, `_sum` series belong to it). */
function registeredAs(series: string, registered: ReadonlyMap<string, string>): string | null {
  if (registered.has(series)) return series;
  const base = series.replace(/_(bucket|count|sum)$/, '');
  return base !== series && registered.get(base) === 'histogram' ? base : null;
}

/** What is wrong with the dashboard: Grafana's required fields, agreement with the docs' panels, PromQL, registered names. */
function dashboardProblems(dashboard: Dashboard, docs: string, registered: ReadonlyMap<string, string>): string[] {
  const problems: string[] = [];
  if (typeof dashboard.uid !== 'string' || !/^[\w-]{1,40}$/.test(dashboard.uid)) problems.push('uid: a string of at most 40 word characters');
  if (typeof dashboard.title !== 'string' || dashboard.title === '') problems.push('title missing');
  if (typeof dashboard.schemaVersion !== 'number') problems.push('schemaVersion missing');
  const dsVar = dashboard.templating?.list?.find((v) => v.name === 'datasource');
  if (dsVar?.type !== 'datasource' || dsVar.query !== 'prometheus') problems.push('no `datasource` variable of type datasource (prometheus)');
  const panels = Array.isArray(dashboard.panels) ? dashboard.panels : [];
  if (panels.length === 0) problems.push('no panels');
  const ids = new Set<unknown>();
  for (const p of panels) {
    const at = `panel ${JSON.stringify(p.title)}`;
    if (typeof p.id !== 'number' || ids.has(p.id)) problems.push(`${at}: id missing or repeated`);
    ids.add(p.id);
    if (typeof p.type !== 'string' || typeof p.title !== 'string') problems.push(`${at}: type or title missing`);
    const g = p.gridPos;
    if (!g || ![g.h, g.w, g.x, g.y].every((v) => typeof v === 'number') || (g.x as number) + (g.w as number) > 24) problems.push(`${at}: gridPos`);
    const targets = Array.isArray(p.targets) ? p.targets : [];
    if (targets.length === 0) problems.push(`${at}: no targets`);
    const refIds = targets.map((t) => t.refId);
    if (refIds.some((r) => typeof r !== 'string') || new Set(refIds).size !== refIds.length) problems.push(`${at}: refIds missing or repeated`);
    for (const ds of [p.datasource, ...targets.map((t) => t.datasource)]) {
      if (JSON.stringify(ds) !== JSON.stringify({ type: 'prometheus', uid: '${datasource}' })) problems.push(`${at}: datasource is not the variable`);
    }
  }
  const fromDashboard = panels.map((p) => ({ title: p.title, exprs: (p.targets ?? []).map((t) => t.expr) }));
  const fromDocs = docsPanels(docs);
  if (JSON.stringify(fromDashboard) !== JSON.stringify(fromDocs))
    problems.push(`panels differ from ${DOCS}: ${JSON.stringify({ fromDashboard, fromDocs })}`);
  const exprs = [...fromDocs.flatMap((p) => p.exprs), ...fromDashboard.flatMap((p) => p.exprs.map(String))];
  for (const expr of exprs) {
    try {
      for (const name of metricsOf(expr)) if (!registeredAs(name, registered)) problems.push(`${name} (in ${expr}) is not registered by the code`);
    } catch (e) {
      problems.push((e as Error).message);
    }
  }
  // every runplane_* name the docs page mentions, in the table too
  for (const [name] of docs.matchAll(/\brunplane_\w+/g))
    if (!registeredAs(name, registered)) problems.push(`${name} (in ${DOCS}) is not registered by the code`);
  return problems;
}

const registered = new Map(metricsRegistry.getMetricsAsArray().map((m) => [m.name, String(m.type)]));
const dashboardText = readFileSync(join(repo, DASHBOARD), 'utf8');
const docs = readFileSync(join(repo, DOCS), 'utf8');

describe('the Grafana dashboard', () => {
  it('finds the panels of the docs page and the registered metrics it checks against', () => {
    expect(docsPanels(docs).length).toBeGreaterThanOrEqual(15);
    expect(registered.get('runplane_run_duration_seconds')).toBe('histogram');
    expect(registered.get('runplane_appends_total')).toBe('counter');
  });

  it('parses with the fields Grafana needs, has exactly the panels and PromQL of docs/metrics.md, and names only registered metrics', () => {
    expect(dashboardProblems(JSON.parse(dashboardText) as Dashboard, docs, registered)).toEqual([]);
  });

  it('every series the docs table lists is read by a panel', () => {
    const table = docs.split('\n## Queries\n')[0]!;
    const listed = new Set([...table.matchAll(/^\| `(runplane_\w+)`/gm)].map((m) => m[1]!));
    const used = new Set(docsPanels(docs).flatMap((p) => p.exprs.flatMap(metricsOf).map((n) => registeredAs(n, registered))));
    expect([...listed].filter((n) => !used.has(n))).toEqual([]);
    expect(listed.size).toBeGreaterThanOrEqual(12);
  });
});

describe('the checks fail on what is stale', () => {
  it('reports a renamed metric, a query that is not PromQL, a panel the docs do not have, and a missing uid', () => {
    const planted = JSON.parse(dashboardText) as Dashboard;
    planted.panels![0]!.targets![0]!.expr = 'sum(rate(runplane_no_such_metric_total[5m]))';
    planted.panels![1]!.targets![0]!.expr = 'sum(rate(runplane_appends_total[5m]';
    planted.panels!.push({ ...planted.panels![2]!, id: 999, title: 'Not in the docs' });
    delete planted.uid;
    const problems = dashboardProblems(planted, docs, registered).join('\n');
    expect(problems).toMatch(/runplane_no_such_metric_total .* is not registered/);
    expect(problems).toMatch(/not PromQL: sum\(rate\(runplane_appends_total\[5m\]$/m);
    expect(problems).toMatch(/panels differ from docs\/metrics.md/);
    expect(problems).toMatch(/^uid/m);
    // a histogram's series belong to it; a counter has no _bucket
    expect(registeredAs('runplane_tool_duration_seconds_bucket', registered)).toBe('runplane_tool_duration_seconds');
    expect(registeredAs('runplane_appends_total_bucket', registered)).toBeNull();
  });
});
