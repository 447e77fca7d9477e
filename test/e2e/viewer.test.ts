/**
 * The Run viewer (docs/operations.md "The Run viewer") in a real headless Chromium (Debian's `chromium`, driven by
 * `playwright-core`) against the real stack with authentication on: the page publication serves at
 * `/viewer/` lists the signed-in principal's Runs from admission (another origin: CORS), follows
 * one Run live to its settlement (passages as they commit, text from the log shown as text),
 * reconnects with `Last-Event-ID` after publication is killed with SIGKILL and restarted (the
 * settlement shown, no passage or event twice), and answers a Run's question for a human (K10) so
 * the Run completes. A tool call is shown pending while it runs and marked `unknown` (K5) when the
 * tools service running it is killed with SIGKILL and its claim expires (a real `record_effect`
 * call; the receipt is the restarted tools service's, nothing is forged). Accessibility is
 * checked in the page: axe-core (WCAG 2.x A/AA and best practices: labels, contrast, landmarks,
 * names) finds no violation on the Run list, a live Run with a question to answer and a settled Run
 * with an unknown tool outcome; the list, a Run and its answer form are used with the
 * keyboard alone (Tab, Enter), every element focused on the way showing a visible focus ring.
 * A settled Run's clocks stop at the settlement (the text stays the same across
 * re-renders over real seconds); event names wrap only after their dots (measured from the
 * rendered line boxes of each character); a link's `?admission=` naming another host (a local
 * HTTP server standing in for an attacker) is refused on the page and gets no request, the
 * browser blocks a direct call to it (CSP `connect-src` lists only the configured admission).
 * Screenshots are kept under .runplane/test-artifacts/viewer/.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { AxeBuilder } from '@axe-core/playwright';
import { chromium, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { RunplaneClient } from '@runplane/client';
import { createDevAuth, repoRoot, viewerOrigins, type DevAuth } from '@runplane/devstack';
import { effectsOf, kill9, ofType } from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = join(repoRoot(), '.runplane', 'test-artifacts', 'viewer');
const USER = 'viewer-user';
/**
 * A running call's claim lasts this long unless renewed (K5), ms: its tools process killed, the
 * call is declared `unknown` after it. Short for the test, long enough that a live process's
 * renewals (every third of it) keep their claims on a loaded machine.
 */
const CLAIM_TTL_MS = 5000;

let t: TestStack;
let auth: DevAuth;
let token: string;
let browser: BrowserContext;
const dirs: string[] = [];
/** The file `record_effect` appends a line to for each execution. */
const EFFECTS = () => join(dirs[0]!, 'effects.log');
const pageErrors: string[] = [];

beforeAll(async () => {
  for (let i = 0; i < 2; i++) dirs.push(mkdtempSync(join(tmpdir(), 'rp-viewer-')));
  mkdirSync(ARTIFACTS, { recursive: true });
  auth = await createDevAuth(dirs[0]!);
  t = await startTestStack('viewer', {
    ...auth.env,
    RUNPLANE_ACK_WAIT_MS: '2000',
    // record_effect (a test tool) running when its tools process is killed: a real unknown receipt
    // (K5). Not a short tool timeout: the first list_funds of a thread parses the sample data
    // (5 s on a loaded machine) and would be declared unknown too
    RUNPLANE_TEST_TOOLS: 'record_effect',
    RUNPLANE_RECORD_EFFECT_FILE: EFFECTS(),
    RUNPLANE_TOOL_CLAIM_TTL_MS: String(CLAIM_TTL_MS),
    RUNPLANE_TOOL_CLAIM_SWEEP_MS: '300',
  });
  token = await auth.mint(USER);
  // a fresh profile (user data dir) per run; the machine's network is closed: nothing in the
  // background may reach out
  browser = await chromium.launchPersistentContext(dirs[1]!, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1200, height: 900 },
  });
}, 180_000);
afterAll(async () => {
  await browser?.close();
  await t?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const client = () => new RunplaneClient({ ...t.stack.endpoints, token });

/**
 * A new tab on the viewer, connected with the user's token typed into the labelled field. With
 * `keyboard`, the token field and the Connect button are reached with Tab and used with the
 * keyboard alone (see `tabTo`); otherwise they are filled and clicked.
 */
async function openViewer({ keyboard = false } = {}): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(m.text());
  });
  await page.goto(`${t.stack.endpoints.publication}/viewer/?admission=${encodeURIComponent(t.stack.endpoints.admission)}`);
  await connectFormReady(page);
  if (keyboard) {
    await tabTo(page, page.getByLabel('Bearer token'));
    await page.keyboard.type(token);
    await tabTo(page, page.getByRole('button', { name: 'Connect' }));
    await page.keyboard.press('Enter');
  } else {
    await page.getByLabel('Bearer token').fill(token);
    await page.getByRole('button', { name: 'Connect' }).click();
  }
  return page;
}

/**
 * Resolves once the page has loaded its config.json, filled the connection form and wired it
 * (the form drops `aria-busy`): a token typed before that would be overwritten, and Connect would
 * submit the form to nowhere.
 */
async function connectFormReady(page: Page): Promise<void> {
  await page.locator('#connect:not([aria-busy])').waitFor({ state: 'attached' });
}

/** What the focused element shows of its focus: its tag, its text or label, and its outline. */
interface FocusSeen {
  element: string;
  isTarget: boolean;
  focusVisible: boolean;
  outlineStyle: string;
  outlineWidthPx: number;
}

/** The little of the DOM the functions run in the page use (the tests' TypeScript has no DOM library). */
interface PageElement {
  tagName: string;
  id: string;
  textContent: string | null;
  getAttribute(name: string): string | null;
  matches(selector: string): boolean;
}
interface PageGlobals {
  document: {
    activeElement: PageElement | null;
    body: PageElement;
    getElementById(id: string): { dataset: Record<string, string | undefined> } | null;
  };
  getComputedStyle(e: PageElement): { outlineStyle: string; outlineWidth: string };
}

/** The id of the element that has the focus in the page ('' when none has one). */
const focusedId = (page: Page): Promise<string> => page.evaluate(() => (globalThis as unknown as PageGlobals).document.activeElement?.id ?? '');

/**
 * Presses Tab until `target` has the focus (at most `maxTabs` presses). Every element that gets the
 * focus on the way must match `:focus-visible` and draw an outline of at least 2 px (a visible
 * focus, WCAG 2.4.7). @throws when `target` is not reached.
 */
async function tabTo(page: Page, target: Locator, maxTabs = 30): Promise<void> {
  const handle = await target.elementHandle();
  for (let i = 0; i < maxTabs; i++) {
    await page.keyboard.press('Tab');
    const seen = await page.evaluate((wanted): FocusSeen | null => {
      const w = globalThis as unknown as PageGlobals;
      const e = w.document.activeElement;
      if (!e || e === w.document.body) return null; // past the last element: Tab comes round again
      const style = w.getComputedStyle(e);
      const name = e.getAttribute('aria-label') ?? (e.textContent ?? '').trim().slice(0, 40);
      return {
        element: `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ''} ${name}`,
        isTarget: e === (wanted as unknown as PageElement),
        focusVisible: e.matches(':focus-visible'),
        outlineStyle: style.outlineStyle,
        outlineWidthPx: parseFloat(style.outlineWidth),
      };
    }, handle);
    if (!seen) continue;
    expect({ ...seen, visible: seen.focusVisible && seen.outlineStyle !== 'none' && seen.outlineWidthPx >= 2 }).toMatchObject({
      element: seen.element,
      visible: true,
    });
    if (seen.isTarget) return;
  }
  throw new Error(`${maxTabs} presses of Tab did not reach ${target.toString()}`);
}

/**
 * Runs axe-core in the page (WCAG 2.0/2.1/2.2 A and AA rules and axe's best practices: labels,
 * contrast, landmarks, names) and expects no violation; a violation is reported with its rule,
 * impact and the elements it found.
 */
async function expectAccessible(page: Page, what: string): Promise<void> {
  // legacy mode: axe runs in the page itself (the viewer has no frames), without the blank page the
  // frame-by-frame mode opens to combine its results: seconds faster on a loaded machine
  const results = await new AxeBuilder({ page })
    .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'])
    .setLegacyMode(true)
    .analyze();
  const violations = results.violations.map((v) => ({
    rule: v.id,
    impact: v.impact,
    help: v.help,
    nodes: v.nodes.map((n) => `${n.target.join(' ')}: ${n.failureSummary ?? ''}`),
  }));
  expect({ what, violations }).toEqual({ what, violations: [] });
  // the rules really ran: contrast and labels among them
  expect(results.passes.map((r) => r.id)).toEqual(expect.arrayContaining(['color-contrast', 'label', 'landmark-one-main', 'page-has-heading-one']));
}

/**
 * Waits until the page's list has the Run, refreshing it with its button: clicked, or with
 * `keyboard` reached with Tab from where the focus is and pressed with Enter (the focus stays on it).
 */
async function waitListed(page: Page, runId: string, { keyboard = false } = {}): Promise<Locator> {
  const link = page.locator(`tr[data-run-id="${runId}"] a`);
  const refresh = page.getByRole('button', { name: 'Refresh the list' });
  if (keyboard) await tabTo(page, refresh);
  await eventually(
    async () => {
      const listed = page.waitForResponse((r) => r.url().startsWith(`${t.stack.endpoints.admission}/v1/runs?`));
      if (keyboard) await page.keyboard.press('Enter');
      else await refresh.click();
      await listed;
      return (await link.count()) > 0 ? true : null;
    },
    30_000,
    `Run ${runId} in the page's list`,
  );
  return link;
}

/** Refreshes the page's list until the Run is in it, then opens it with the keyboard (focus, Enter). */
async function openRunFromList(page: Page, runId: string): Promise<void> {
  const link = await waitListed(page, runId);
  await link.focus();
  await page.keyboard.press('Enter');
  await page.locator('#run-h', { hasText: runId }).waitFor();
}

/** The value of `attr` of every element `selector` matches, in document order. */
async function attributes(page: Page, selector: string, attr: string): Promise<string[]> {
  const out: string[] = [];
  for (const element of await page.locator(selector).all()) out.push((await element.getAttribute(attr)) ?? '');
  return out;
}

/** The passages the page shows: id and text, in order. */
async function passagesIn(page: Page): Promise<{ id: string; text: string }[]> {
  const [ids, texts] = await Promise.all([attributes(page, '#passages > li', 'data-passage-id'), page.locator('#passages > li').allTextContents()]);
  return ids.map((id, i) => ({ id, text: texts[i]! }));
}

/** The stream sequences of the events in the page's lanes. */
const seqsIn = async (page: Page): Promise<number[]> => (await attributes(page, '.events li', 'data-seq')).map(Number);

async function settledIn(page: Page, timeout = 90_000): Promise<string> {
  const outcome = page.locator('#settled-outcome');
  await outcome.waitFor({ timeout });
  return (await outcome.getAttribute('data-outcome'))!;
}

/** The Run's stored events in stream order up to its settlement (what its event stream sends). */
async function throughSettlement(runId: string) {
  const events = [...(await t.log.readRun(runId))].sort((a, b) => a.seq - b.seq);
  const settled = events.find((e) => e.event.type === 'run.settled');
  if (!settled) throw new Error(`run ${runId} has no settlement in the log`);
  return events.filter((e) => e.seq <= settled.seq);
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** A screenshot of the Run's tool calls and receipts only (the card). */
async function shotOfTools(page: Page, name: string): Promise<void> {
  await page.locator('section[aria-labelledby="tools-h"]').screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

/** Binds a one-turn answer of `paragraphs` to `key`, pausing `paragraphDelayMs` after each paragraph. */
async function scriptAnswer(key: string, paragraphs: string[], paragraphDelayMs: number): Promise<void> {
  await t.setScenario({ steps: [{ reply: { content: paragraphs.join('\n\n') }, paragraphDelayMs }], then: 'error' }, key);
}

/** The sources of a Content-Security-Policy's `connect-src` directive, in order ([] when absent). */
function connectSrcOf(csp: string | null): string[] {
  const directive = (csp ?? '')
    .split(';')
    .map((d) => d.trim().split(/\s+/))
    .find(([name]) => name === 'connect-src');
  return directive ? directive.slice(1) : [];
}

/** What a local HTTP server standing in for an attacker's host saw of one request. */
interface HostileHit {
  method: string;
  url: string;
  authorization: string | null;
}

/**
 * Starts an HTTP server on a free loopback port that answers everything with 200 and the most
 * permissive CORS (any origin, the Authorization header allowed): only the viewer itself and the
 * browser's CSP can keep a request from reaching it. Records every request it gets.
 */
async function startHostileHost(): Promise<{ url: string; hits: HostileHit[]; close(): Promise<void> }> {
  const hits: HostileHit[] = [];
  const server = createServer((req, res) => {
    const headers: IncomingHttpHeaders = req.headers;
    hits.push({ method: req.method ?? '', url: req.url ?? '', authorization: headers.authorization ?? null });
    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Access-Control-Allow-Origin': '*',
      'Access-Control-Allow-Headers': 'Authorization, Content-Type, Accept',
      'Access-Control-Allow-Methods': 'GET, POST',
    });
    res.end('{"runs":[],"nextCursor":null}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The budget card's rendered state: its text, how many times it was rendered, its clocks. */
async function budgetOf(page: Page): Promise<{ text: string; renders: number; clocks: string | null }> {
  const budget = page.locator('#budget');
  return {
    text: (await budget.textContent()) ?? '',
    renders: Number(await budget.getAttribute('data-renders')),
    clocks: await budget.getAttribute('data-clocks'),
  };
}

/**
 * Waits, by polling the page, until it has re-rendered its budget at least twice more and at
 * least `ms` of its own clock have passed since the call: a real interval over which any running
 * clock (shown to the second) must change.
 */
async function acrossRenders(page: Page, ms: number): Promise<void> {
  const start = await page.evaluate((): { renders: number; now: number } => {
    const w = globalThis as unknown as ClockGlobals;
    return { renders: Number(w.document.getElementById('budget')?.dataset.renders ?? 0), now: w.Date.now() };
  });
  await page.waitForFunction(
    ({ renders, now, wait }) => {
      const w = globalThis as unknown as ClockGlobals;
      return Number(w.document.getElementById('budget')?.dataset.renders ?? 0) >= renders + 2 && w.Date.now() >= now + wait;
    },
    { ...start, wait: ms },
    { timeout: ms + 10_000, polling: 100 },
  );
}
interface ClockGlobals {
  document: { getElementById(id: string): { dataset: Record<string, string | undefined> } | null };
  Date: { now(): number };
}

/** How one event name is laid out: its lines and the character before each line break. */
interface NameLayout {
  type: string;
  text: string;
  title: string;
  lines: number;
  breaksAfter: string[];
  cut: boolean;
}
interface LayoutNode {
  nodeType: number;
  data: string;
}
interface LayoutElement {
  textContent: string | null;
  title: string;
  childNodes: LayoutNode[];
  scrollWidth: number;
  clientWidth: number;
  closest(selector: string): { dataset: Record<string, string | undefined> } | null;
}
interface LayoutGlobals {
  document: {
    querySelectorAll(selector: string): LayoutElement[];
    getElementById(id: string): { style: Record<string, string> } | null;
    createRange(): { setStart(n: LayoutNode, i: number): void; setEnd(n: LayoutNode, i: number): void; getClientRects(): { top: number }[] };
  };
}

/**
 * The rendered layout of every event name in the lanes: for each character its line box (the
 * top of its client rect), a new line wherever the top moves down; `breaksAfter` lists the
 * character each line ends with; `cut` when the name is wider than its box (ellipsis).
 */
const eventNameLayouts = (page: Page): Promise<NameLayout[]> =>
  page.evaluate((): NameLayout[] => {
    const d = (globalThis as unknown as LayoutGlobals).document;
    return [...d.querySelectorAll('.events .event-type')].map((el) => {
      const chars: { c: string; top: number }[] = [];
      for (const node of [...el.childNodes]) {
        if (node.nodeType !== 3) continue; // the <wbr> elements
        for (let i = 0; i < node.data.length; i++) {
          const r = d.createRange();
          r.setStart(node, i);
          r.setEnd(node, i + 1);
          chars.push({ c: node.data[i]!, top: r.getClientRects()[0]?.top ?? Number.NaN });
        }
      }
      const breaksAfter: string[] = [];
      for (let k = 1; k < chars.length; k++) if (chars[k]!.top > chars[k - 1]!.top + 2) breaksAfter.push(chars[k - 1]!.c);
      return {
        type: el.closest('li')?.dataset.type ?? '',
        text: el.textContent ?? '',
        title: el.title,
        lines: breaksAfter.length + 1,
        breaksAfter,
        cut: el.scrollWidth > el.clientWidth + 1,
      };
    });
  });

const PARAGRAPHS = [
  'DIA holds the thirty stocks of the Dow Jones Industrial Average, weighted by price.',
  'Its largest positions are the highest-priced shares, not the largest companies. <b>Not markup</b> & <i>not</i> either.',
  'Coverage: only the files in the data folder were read; nothing else is claimed.',
];

describe('the Run viewer in a real browser', () => {
  it('is served by publication without a token, with a strict Content-Security-Policy; /viewer redirects to /viewer/', async () => {
    const base = t.stack.endpoints.publication;
    const bare = await fetch(`${base}/viewer?admission=x`, { redirect: 'manual' });
    expect([bare.status, bare.headers.get('location')]).toEqual([301, '/viewer/?admission=x']);
    const page = await fetch(`${base}/viewer/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    // the page may connect to its own origin and to the configured admission only (`RUNPLANE_VIEWER_ADMISSION_ORIGINS`):
    // no scheme-wide source (http:, https:), no wildcard
    const admissionOrigins = viewerOrigins(t.stack.endpoints.admission);
    expect(connectSrcOf(page.headers.get('content-security-policy'))).toEqual(["'self'", ...admissionOrigins]);
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    const config = await fetch(`${base}/viewer/config.json`);
    expect([config.status, config.headers.get('content-type'), await config.json()]).toEqual([
      200,
      expect.stringMatching(/^application\/json/),
      { admissionOrigins },
    ]);
    expect(connectSrcOf(config.headers.get('content-security-policy'))).toEqual(["'self'", ...admissionOrigins]);
    const script = await fetch(`${base}/viewer/viewer.js`);
    expect([script.status, script.headers.get('content-type')]).toEqual([200, expect.stringMatching(/javascript/)]);
    // the API beside it still wants the token
    expect((await fetch(`${base}/v1/runs/nope/answer`)).status).toBe(401);
  });

  it('serves the page without a token, lists the Run, follows it live to its settlement (passages as they commit, text never as markup)', async () => {
    const page = await openViewer();
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Runplane Run viewer');
    expect(await page.getByRole('main').count()).toBe(1);
    const key = `live-${t.tag}`;
    await scriptAnswer(key, PARAGRAPHS, 4_000);
    const question = `[${key}] What does DIA hold? <img src=x id=injected>`;
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: question });
    const runId = body.runId;
    await openRunFromList(page, runId);

    // live: the first passage is on the page while the Run is still answering
    await page.locator('#passages > li').first().waitFor({ timeout: 30_000 });
    const before = await t.log.readRun(runId);
    expect(ofType(before, 'run.settled')).toHaveLength(0);

    expect(await settledIn(page)).toBe('completed');
    // the list's row, loaded while the Run ran, shows the settlement it saw without a refresh
    await page.locator(`tr[data-run-id="${runId}"] td.outcome-completed`).waitFor({ timeout: 5_000 });
    expect(await page.locator(`tr[data-run-id="${runId}"] td`).nth(1).textContent()).toBe('settled');
    const events = await throughSettlement(runId);
    const committed = ofType(events, 'passage.committed').map((p) => ({ id: p.data.passageId, text: p.data.text }));
    expect(await passagesIn(page)).toEqual(committed);
    expect(committed.map((p) => p.text)).toEqual(PARAGRAPHS);
    // text from the log is text: the question's and the passage's tags are not elements
    expect(await page.locator('#run-question').textContent()).toBe(question);
    expect(await page.locator('#injected').count()).toBe(0);
    expect(await page.locator('#passages b, #passages i').count()).toBe(0);
    expect(await page.locator('#settlement').textContent()).not.toMatch(/null|undefined/);
    // every stored event once, in its owner's lane
    const seqs = await seqsIn(page);
    expect([...seqs].sort((a, b) => a - b)).toEqual(events.map((e) => e.seq));
    for (const owner of ['admission', 'runtime', 'publication', 'lifecycle']) {
      const inLane = await page.locator(`#lane-${owner} li`).count();
      expect([owner, inLane]).toEqual([owner, events.filter((e) => e.event.owner === owner).length]);
    }
    // budget and clocks from the projection
    await page.locator('#budget dt', { hasText: 'Model requests' }).waitFor();
    await eventually(
      async () => ((await page.locator('#budget dd').first().textContent())?.includes('settled') ? true : null),
      15_000,
      'status settled',
    );
    // the list shows the outcome
    await page.getByRole('button', { name: 'Refresh the list' }).click();
    await page.locator(`tr[data-run-id="${runId}"] td.outcome-completed`).waitFor();
    await shot(page, 'run-settled');
    await page.close();
  });

  it('keeps the list up to date on its own: a Run admitted after the page loaded is listed, and its settlement shown, with no click', async () => {
    const page = await openViewer();
    // the first load is done: everything after it comes from the page's own refresh
    await page.waitForResponse((r) => r.url().startsWith(`${t.stack.endpoints.admission}/v1/runs?`));
    const key = `listed-${t.tag}`;
    await scriptAnswer(key, PARAGRAPHS.slice(0, 1), 0);
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    const row = page.locator(`tr[data-run-id="${body.runId}"]`);
    await row.waitFor({ timeout: 20_000 });
    // newest first: the new Run is the list's first row, and the count above the list follows it
    expect(await page.locator('#runs > tr').first().getAttribute('data-run-id')).toBe(body.runId);
    const rows = await page.locator('#runs > tr').count();
    expect(await page.locator('#notice').textContent()).toMatch(new RegExp(`^${rows} Run\\(s\\) listed`));
    await row.locator('td.outcome-completed').waitFor({ timeout: 30_000 });
    expect(await row.locator('td').nth(1).textContent()).toBe('settled');
    // each Run once
    expect(await page.locator(`tr[data-run-id="${body.runId}"]`).count()).toBe(1);
    await page.close();
  });

  it('keeps a settlement it saw in the list while the projections lag: a refresh read before the projector applied it does not show the Run running again', async () => {
    const page = await openViewer();
    const key = `lagging-${t.tag}`;
    await scriptAnswer(key, PARAGRAPHS.slice(0, 2), 2_000);
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    const runId = body.runId;
    await openRunFromList(page, runId);
    await page.locator('#passages > li').first().waitFor({ timeout: 30_000 });
    // the projections stop following the log: every later list refresh reads the Run as running
    await kill9(t, 'projector');
    try {
      expect(await settledIn(page)).toBe('completed');
      const row = page.locator(`tr[data-run-id="${runId}"]`);
      await row.locator('td.outcome-completed').waitFor({ timeout: 5_000 });
      // a refresh after the settlement, answered from the lagging projections (the Run not settled there), then merged
      const merged = Number((await page.locator('#runs').getAttribute('data-refreshes')) ?? 0);
      const refreshed = await page.waitForResponse((r) => r.url().startsWith(`${t.stack.endpoints.admission}/v1/runs?`), { timeout: 20_000 });
      const listed = ((await refreshed.json()) as { runs: { runId: string; status: string }[] }).runs.find((r) => r.runId === runId);
      expect(listed?.status).not.toBe('settled');
      await page.waitForFunction(
        (n) => Number((globalThis as unknown as PageGlobals).document.getElementById('runs')?.dataset.refreshes ?? 0) > n,
        merged,
        { timeout: 10_000 },
      );
      expect([await row.locator('td').nth(1).textContent(), await row.locator('td').nth(2).getAttribute('class')]).toEqual([
        'settled',
        'outcome outcome-completed',
      ]);
    } finally {
      await t.stack.startService('projector');
    }
    await page.close();
  });

  it('follows a Run across a kill -9 and restart of publication: reconnects with Last-Event-ID, shows the settlement, no passage or event twice', async () => {
    const page = await openViewer();
    const key = `restart-${t.tag}`;
    const paragraphs = [0, 1, 2, 3, 4].map((i) => `Paragraph ${i + 1} of the answer that streams across a publication restart.`);
    await scriptAnswer(key, paragraphs, 1_500);
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does QQQ hold?` });
    const runId = body.runId;
    await openRunFromList(page, runId);
    await page.locator('#passages > li').first().waitFor({ timeout: 30_000 });

    const port = new URL(t.stack.endpoints.publication).port;
    await kill9(t, 'publication');
    expect(ofType(await t.log.readRun(runId), 'run.settled')).toHaveLength(0);
    // the page notices the stream broke (it keeps what it has)
    await eventually(
      async () => (Number(await page.locator('#stream-state').getAttribute('data-reconnects')) > 0 ? true : null),
      15_000,
      'the page to see the stream interrupted',
    );
    await shot(page, 'run-reconnecting');
    await t.stack.startService('publication', { PUBLICATION_PORT: port });

    expect(await settledIn(page)).toBe('completed');
    const events = await throughSettlement(runId);
    const committed = ofType(events, 'passage.committed').map((p) => ({ id: p.data.passageId, text: p.data.text }));
    expect(committed.map((p) => p.text)).toEqual(paragraphs);
    const shown = await passagesIn(page);
    expect(shown).toEqual(committed);
    expect(new Set(shown.map((p) => p.id)).size).toBe(shown.length);
    const seqs = await seqsIn(page);
    expect(new Set(seqs).size).toBe(seqs.length);
    expect([...seqs].sort((a, b) => a - b)).toEqual(events.map((e) => e.seq));
    await page.close();
  });

  it("answers the Run's question for a human from the page (K10): the answer is recorded as the token's user and the Run completes", async () => {
    const page = await openViewer({ keyboard: true });
    const key = `ask-${t.tag}`;
    const final = 'Using the share class you named: done.';
    await t.setScenario(
      {
        steps: [
          {
            reply: {
              content: '',
              toolCalls: [
                { id: `call_funds_${key}`, name: 'list_funds', arguments: {} },
                { id: `call_ask_${key}`, name: 'ask_human', arguments: { question: 'Which share class do you mean?' } },
              ],
            },
          },
          { reply: { content: final } },
        ],
        then: 'error',
      },
      key,
    );
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] Compare the share classes` });
    const runId = body.runId;
    // the keyboard alone: Tab to the list's refresh button, Enter until the Run is listed, Tab to
    // its link, Enter; the Run's heading takes the focus
    const link = await waitListed(page, runId, { keyboard: true });
    await expectAccessible(page, 'the Run list');
    await tabTo(page, link);
    await shot(page, 'list-keyboard-focus');
    await page.keyboard.press('Enter');
    await page.locator('#run-h', { hasText: runId }).waitFor();
    await expect(focusedId(page)).resolves.toBe('run-h');

    const answer = page.getByLabel('Your answer');
    await answer.waitFor({ timeout: 30_000 });
    await expect(page.locator('form.wait .question').textContent()).resolves.toBe('Which share class do you mean?');
    // the question's form: Tab to the answer, type it, Tab to the button, Enter
    await tabTo(page, answer);
    await page.keyboard.type('The institutional class, please.');
    await expect(answer.inputValue()).resolves.toBe('The institutional class, please.');
    await expectAccessible(page, 'a live Run with a question to answer');
    await tabTo(page, page.getByRole('button', { name: 'Send the answer' }));
    await shot(page, 'run-wait');
    await page.keyboard.press('Enter');

    expect(await settledIn(page)).toBe('completed');
    const events = await t.log.readRun(runId);
    const answered = ofType(events, 'wait.answered');
    expect(answered.map((e) => [e.data.answer, e.data.answeredBy])).toEqual([['The institutional class, please.', USER]]);
    expect((await passagesIn(page)).map((p) => p.text)).toEqual([final]);
    await page.locator('.wait.answered', { hasText: `Answered by ${USER}` }).waitFor();
    // the focus, on the button that was pressed, moved to what replaced the form (not lost to the body)
    expect(await page.locator('.wait.answered').evaluate((e) => e === (globalThis as unknown as PageGlobals).document.activeElement)).toBe(true);
    // the budget follows the projection to the settlement
    await page.locator('#budget dd', { hasText: 'settled (completed)' }).waitFor({ timeout: 30_000 });
    // the tool call of the same batch, with its receipt as the log has it
    const receipt = ofType(events, 'tool.call.receipt').find((r) => r.data.name === 'list_funds')!;
    const row = page.locator(`#tools tr[data-tool-call-id="${receipt.data.toolCallId}"]`);
    expect([await row.getAttribute('data-status'), await row.locator('td').nth(2).textContent()]).toEqual([receipt.data.status, receipt.data.status]);
    await shot(page, 'run-wait-answered');
    await page.close();
  });

  it('closes a question the Run can no longer take once it settles (canceled), and at phone width wraps long text and keeps the page as wide as the screen; bidirectional controls are shown, not obeyed', async () => {
    const page = await browser.newPage();
    await page.setViewportSize({ width: 375, height: 740 });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.goto(`${t.stack.endpoints.publication}/viewer/?admission=${encodeURIComponent(t.stack.endpoints.admission)}`);
    await connectFormReady(page);
    await page.getByLabel('Bearer token').fill(token);
    await page.getByRole('button', { name: 'Connect' }).click();
    const key = `close-${t.tag}`;
    const long = `https://example.com/${'x'.repeat(3_000)}`;
    await t.setScenario(
      {
        steps: [
          {
            reply: {
              content: `See ${long}`,
              toolCalls: [
                { id: `call_funds_${key}`, name: 'list_funds', arguments: {} },
                { id: `call_ask_${key}`, name: 'ask_human', arguments: { question: 'Keep the file \u202Eexe.txt\u202C?' } },
              ],
            },
          },
        ],
        then: 'error',
      },
      key,
    );
    const { body } = await client().postMessage(`conv-${key}`, {
      clientMessageId: key,
      content: `[${key}] Compare the share classes ${'y'.repeat(150)}`,
    });
    const runId = body.runId;
    await openRunFromList(page, runId);
    await page.getByLabel('Your answer').waitFor({ timeout: 30_000 });
    await client().cancelRun(runId, { reason: 'changed my mind' });
    expect(await settledIn(page)).toBe('canceled');
    // no form left that admission would refuse: the question is shown closed, in words
    const closed = page.locator('.wait.closed');
    await closed.waitFor();
    expect(await closed.textContent()).toContain('can no longer be answered');
    expect(await page.getByRole('button', { name: 'Send the answer' }).count()).toBe(0);
    // the question's right-to-left override is shown as its code point, not obeyed ("txt.exe")
    expect(await closed.locator('.question').textContent()).toBe('Keep the file ⟦U+202E⟧exe.txt⟦U+202C⟧?');
    // a phone's width: the page is no wider than the screen (a table scrolls inside its card)
    await page.locator('#tools tr').first().waitFor();
    const widths = await page.evaluate(() => {
      const g = globalThis as unknown as { document: { documentElement: { scrollWidth: number } }; innerWidth: number };
      return { page: g.document.documentElement.scrollWidth, screen: g.innerWidth };
    });
    expect(widths.page).toBeLessThanOrEqual(widths.screen);
    await shot(page, 'run-phone-width');
    await page.close();
  });

  it('forgets the token with what it showed (the list, the open Run); a link naming no Run says so', async () => {
    const page = await openViewer();
    const key = `forget-${t.tag}`;
    await scriptAnswer(key, PARAGRAPHS.slice(0, 1), 0);
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    await openRunFromList(page, body.runId);
    await page.getByRole('button', { name: /Forget the token/ }).click();
    expect(await page.locator('#runs tr').count()).toBe(0);
    expect(await page.locator('#run').isHidden()).toBe(true);
    expect(await page.locator('#notice').textContent()).toContain('forgotten');
    await page.evaluate(() => {
      (globalThis as unknown as { location: { hash: string } }).location.hash = '#run/%3Cimg%20src%3Dx%3E';
    });
    await page.locator('#notice', { hasText: 'does not name a Run' }).waitFor();
    await page.close();
  });

  it('marks a running tool call as pending and, its tools process killed, its unknown outcome (K5), in words and in its accessible name, never as a success', async () => {
    const page = await openViewer();
    const key = `unknown-${t.tag}`;
    const final = 'The effect may or may not have been recorded: its outcome is unknown.';
    await t.setScenario(
      {
        steps: [
          // a real call of the test tool, still running when its tools process is killed
          { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs: 60_000 } }] } },
          { reply: { content: final } },
        ],
        then: 'error',
      },
      key,
    );
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] Record the effect` });
    const runId = body.runId;
    await openRunFromList(page, runId);
    const row = page.locator('#tools tr', { hasText: 'record_effect' });
    const outcomeCell = row.getByRole('cell').nth(2);

    // while it runs: pending, in words (not a success, not a bare status word)
    await page.locator('#tools tr[data-status="dispatched"]').waitFor({ timeout: 30_000 });
    expect(await row.getByRole('cell', { name: /^Pending: dispatched, no receipt yet/ }).count()).toBe(1);
    await eventually(async () => (effectsOf(EFFECTS(), runId).length > 0 ? true : null), 30_000, 'the tool to start');
    // the log agrees: dispatched, no receipt
    const running = await t.log.readRun(runId);
    expect([ofType(running, 'tool.call.dispatched').length, ofType(running, 'tool.call.receipt').length]).toEqual([1, 0]);
    await shot(page, 'run-tool-pending');
    await shotOfTools(page, 'tools-pending');

    // the tools process dies mid-call; a new one finds the expired claim and records `unknown`
    await kill9(t, 'tools');
    await t.stack.startService('tools');
    // unknown: marked in words and in the cell's accessible name
    await page.locator('#tools tr[data-status="unknown"]').waitFor({ timeout: 30_000 });
    expect(await row.getByRole('cell', { name: /^Unknown outcome/ }).count()).toBe(1);
    expect(await outcomeCell.textContent()).toMatch(/may or may not have taken effect/);
    expect(await outcomeCell.textContent()).not.toMatch(/succeeded/);

    await settledIn(page);
    const events = await throughSettlement(runId);
    const receipts = ofType(events, 'tool.call.receipt');
    expect(receipts.map((r) => [r.data.name, r.data.status, r.data.error?.code])).toEqual([['record_effect', 'unknown', 'executor_lost']]);
    expect(effectsOf(EFFECTS(), runId)).toHaveLength(1); // never run again
    expect(await row.getAttribute('data-status')).toBe('unknown');
    expect(await row.getAttribute('data-tool-call-id')).toBe(receipts[0]!.data.toolCallId);
    // the settlement counts it as unknown, in words
    expect(await page.locator('#settlement').textContent()).toContain('1 tool call(s) ended with an unknown outcome');
    // the event's lane entry says so too
    expect(await page.locator('#lane-tools li[data-type="tool.call.receipt"]').textContent()).toContain('record_effect: unknown');
    await expectAccessible(page, 'a settled Run with an unknown tool outcome');
    await shot(page, 'run-tool-unknown');
    await shotOfTools(page, 'tools-unknown');
    await page.close();
  });

  it('stops the clocks of a settled Run at its settlement (no ticking across real seconds) and wraps event names only after their dots', async () => {
    const page = await openViewer();
    const key = `clocks-${t.tag}`;
    const paragraphs = [1, 2, 3, 4].map((i) => `Paragraph ${i} of an answer slow enough to watch its clocks run.`);
    await scriptAnswer(key, paragraphs, 3_000);
    const { body } = await client().postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does SPY hold?` });
    const runId = body.runId;
    await openRunFromList(page, runId);

    // live: the clocks run, and move across a couple of seconds
    await page.locator('#budget[data-clocks="running"] dd', { hasText: 'so far' }).first().waitFor({ timeout: 30_000 });
    const live = await budgetOf(page);
    await acrossRenders(page, 2_100);
    const liveLater = await budgetOf(page);
    expect(ofType(await t.log.readRun(runId), 'run.settled')).toHaveLength(0);
    expect([live.clocks, liveLater.clocks]).toEqual(['running', 'running']);
    expect(liveLater.text).not.toBe(live.text);

    // settled: shown, and the projection caught up (its counts final); the clocks say they
    // stopped, and stay as they are
    expect(await settledIn(page)).toBe('completed');
    await page
      .locator('#budget[data-projected="settled"][data-clocks="stopped"] dd', { hasText: 'stopped at the settlement' })
      .waitFor({ timeout: 30_000 });
    const settled = await budgetOf(page);
    await acrossRenders(page, 2_100);
    const settledLater = await budgetOf(page);
    expect(settledLater.renders).toBeGreaterThanOrEqual(settled.renders + 2);
    expect(settledLater.text).toBe(settled.text);
    expect(settled.text).not.toMatch(/so far| ago|\(in /);
    expect(settled.text).toMatch(/before the settlement/);

    // event names: at the page's own width and in lanes forced narrow, a name breaks only after a
    // dot, is never cut, and keeps its full name as text and title
    const events = await throughSettlement(runId);
    for (const layout of ['default', 'narrow']) {
      if (layout === 'narrow') {
        // CSSOM (allowed by the page's CSP, unlike a style attribute): six lanes of 8rem
        await page.evaluate(() => {
          const lanes = (globalThis as unknown as LayoutGlobals).document.getElementById('lanes')!;
          lanes.style.gridTemplateColumns = 'repeat(6, 8rem)';
        });
      }
      const names = await eventNameLayouts(page);
      expect(names).toHaveLength(events.length);
      for (const n of names) {
        expect({ layout, ...n }).toEqual({ layout, ...n, text: n.type, title: n.type, breaksAfter: n.breaksAfter.map(() => '.'), cut: false });
      }
      // the narrow lanes do make names wrap (at their dots): the check above saw real breaks
      if (layout === 'narrow') expect(names.filter((n) => n.lines > 1).map((n) => n.type)).toContain('passage.committed');
    }
    await shot(page, 'run-narrow-lanes');
    await page.close();
  });

  it("refuses a link's ?admission= naming another host (visible, nothing sent to it: the token stays), and the browser blocks a direct call (CSP connect-src)", async () => {
    const hostile = await startHostileHost();
    const page = await browser.newPage();
    // this page provokes CSP violations on purpose: its console is checked here, not with the others
    const consoleLines: string[] = [];
    page.on('console', (m) => consoleLines.push(m.text()));
    page.on('pageerror', (e) => pageErrors.push(e.message));
    try {
      // the victim's tab is connected (the token in its sessionStorage) ...
      await page.goto(`${t.stack.endpoints.publication}/viewer/`);
      await connectFormReady(page);
      await expect(page.getByLabel('Admission URL').inputValue()).resolves.toBe(t.stack.endpoints.admission);
      await page.getByLabel('Bearer token').fill(token);
      const listed = page.waitForResponse((r) => r.url().startsWith(`${t.stack.endpoints.admission}/v1/runs?`));
      await page.getByRole('button', { name: 'Connect' }).click();
      expect((await listed).status()).toBe(200);

      // ... when it follows an attacker's link: refused in words, the configured admission kept and called
      const link = `${t.stack.endpoints.publication}/viewer/?admission=${encodeURIComponent(hostile.url)}`;
      const relisted = page.waitForResponse((r) => r.url().startsWith(`${t.stack.endpoints.admission}/v1/runs?`));
      await page.goto(link);
      const refused = page.getByRole('alert');
      await refused.waitFor();
      expect(await refused.textContent()).toContain(`Refused the link's admission ${hostile.url}`);
      expect((await relisted).status()).toBe(200);
      await expect(page.getByLabel('Admission URL').inputValue()).resolves.toBe(t.stack.endpoints.admission);
      await expectAccessible(page, 'a refused admission link');
      await shot(page, 'admission-refused');

      // typed into the form: refused the same way
      await page.getByLabel('Admission URL').fill(`${hostile.url}/`);
      await page.getByRole('button', { name: 'Connect' }).click();
      await page.locator('#admission-refused[role="alert"]', { hasText: `Refused the admission URL ${hostile.url}/` }).waitFor();

      // even code in the page could not reach it: the browser refuses the connection (CSP)
      const direct = await page.evaluate(async (url: string) => {
        try {
          await fetch(`${url}/v1/runs`, { headers: { Authorization: 'Bearer stolen' } });
          return 'sent';
        } catch {
          return 'blocked';
        }
      }, hostile.url);
      expect(direct).toBe('blocked');
      expect(consoleLines.some((m) => m.includes('Content Security Policy') && m.includes('connect-src') && m.includes(hostile.url))).toBe(true);

      // the host records what reaches it (proved with one request of the test's own), and got nothing else
      await fetch(`${hostile.url}/sentinel`);
      expect(hostile.hits).toEqual([{ method: 'GET', url: '/sentinel', authorization: null }]);
    } finally {
      await page.close();
      await hostile.close();
    }
  });

  it('raised no error in the pages', () => {
    // a reconnect's failed fetch is logged by the browser as a network error, not a page error
    expect(
      pageErrors.filter((e) => !/Failed to load resource|ERR_CONNECTION_REFUSED|ERR_INCOMPLETE_CHUNKED_ENCODING|network error/i.test(e)),
    ).toEqual([]);
  });
});
