/**
 * The Run viewer (issue [11]) in a real headless Chromium (Debian's `chromium`, driven by
 * `playwright-core`) against the real stack with authentication on: the page publication serves at
 * `/viewer/` lists the signed-in principal's Runs from admission (another origin: CORS), follows
 * one Run live to its settlement (passages as they commit, text from the log shown as text),
 * reconnects with `Last-Event-ID` after publication is killed with SIGKILL and restarted (the
 * settlement shown, no passage or event twice), and answers a Run's question for a human (K10) so
 * the Run completes. Screenshots are kept under .runplane/test-artifacts/viewer/.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { RunplaneClient } from '@runplane/client';
import { createDevAuth, repoRoot, type DevAuth } from '@runplane/devstack';
import { kill9, ofType } from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = join(repoRoot(), '.runplane', 'test-artifacts', 'viewer');
const USER = 'viewer-user';

let t: TestStack;
let auth: DevAuth;
let token: string;
let browser: BrowserContext;
const dirs: string[] = [];
const pageErrors: string[] = [];

beforeAll(async () => {
  for (let i = 0; i < 2; i++) dirs.push(mkdtempSync(join(tmpdir(), 'rp-viewer-')));
  mkdirSync(ARTIFACTS, { recursive: true });
  auth = await createDevAuth(dirs[0]!);
  t = await startTestStack('viewer', { ...auth.env, RUNPLANE_ACK_WAIT_MS: '2000' });
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

/** A new tab on the viewer, connected with the user's token (typed into the labelled fields). */
async function openViewer(): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(m.text());
  });
  await page.goto(`${t.stack.endpoints.publication}/viewer/?admission=${encodeURIComponent(t.stack.endpoints.admission)}`);
  await page.getByLabel('Bearer token').fill(token);
  await page.getByRole('button', { name: 'Connect' }).click();
  return page;
}

/** Refreshes the page's list until the Run is in it, then opens it with the keyboard (focus, Enter). */
async function openRunFromList(page: Page, runId: string): Promise<void> {
  const link = page.locator(`tr[data-run-id="${runId}"] a`);
  await eventually(
    async () => {
      const listed = page.waitForResponse((r) => r.url().startsWith(`${t.stack.endpoints.admission}/v1/runs?`));
      await page.getByRole('button', { name: 'Refresh the list' }).click();
      await listed;
      return (await link.count()) > 0 ? true : null;
    },
    30_000,
    `Run ${runId} in the page's list`,
  );
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

/** Binds a one-turn answer of `paragraphs` to `key`, pausing `paragraphDelayMs` after each paragraph. */
async function scriptAnswer(key: string, paragraphs: string[], paragraphDelayMs: number): Promise<void> {
  await t.setScenario({ steps: [{ reply: { content: paragraphs.join('\n\n') }, paragraphDelayMs }], then: 'error' }, key);
}

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
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
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
    const page = await openViewer();
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
    await openRunFromList(page, runId);

    const answer = page.getByLabel('Your answer');
    await answer.waitFor({ timeout: 30_000 });
    await expect(page.locator('form.wait .question').textContent()).resolves.toBe('Which share class do you mean?');
    await answer.fill('The institutional class, please.');
    await shot(page, 'run-wait');
    await page.getByRole('button', { name: 'Send the answer' }).click();

    expect(await settledIn(page)).toBe('completed');
    const events = await t.log.readRun(runId);
    const answered = ofType(events, 'wait.answered');
    expect(answered.map((e) => [e.data.answer, e.data.answeredBy])).toEqual([['The institutional class, please.', USER]]);
    expect((await passagesIn(page)).map((p) => p.text)).toEqual([final]);
    await page.locator('.wait.answered', { hasText: `Answered by ${USER}` }).waitFor();
    // the budget follows the projection to the settlement
    await page.locator('#budget dd', { hasText: 'settled (completed)' }).waitFor({ timeout: 30_000 });
    // the tool call of the same batch, with its receipt as the log has it
    const receipt = ofType(events, 'tool.call.receipt').find((r) => r.data.name === 'list_funds')!;
    const row = page.locator(`#tools tr[data-tool-call-id="${receipt.data.toolCallId}"]`);
    expect([await row.getAttribute('data-status'), await row.locator('td').nth(2).textContent()]).toEqual([receipt.data.status, receipt.data.status]);
    await shot(page, 'run-wait-answered');
    await page.close();
  });

  it('raised no error in the pages', () => {
    // a reconnect's failed fetch is logged by the browser as a network error, not a page error
    expect(
      pageErrors.filter((e) => !/Failed to load resource|ERR_CONNECTION_REFUSED|ERR_INCOMPLETE_CHUNKED_ENCODING|network error/i.test(e)),
    ).toEqual([]);
  });
});
