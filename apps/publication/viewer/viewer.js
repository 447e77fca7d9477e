/**
 * The Run viewer: a person's view of their Runs in a browser, with no framework and no build step.
 *
 * - The list of Runs comes from admission (`GET /v1/runs`, another origin: admission answers CORS
 *   for the origins of `RUNPLANE_CORS_ORIGINS`); its first page is read again every 5 s while the
 *   page is visible, new Runs added above and listed ones' status and outcome brought up to date.
 * - One Run is followed live from publication (this page's origin): `GET /v1/runs/{runId}/events`
 *   read with fetch and a ReadableStream (an EventSource cannot send the Authorization header),
 *   resumed with `Last-Event-ID` after an error or a stream that ends before the settlement, so
 *   the page survives a publication restart. Events are kept by stream sequence: a replayed one
 *   is never shown twice.
 * - Budget and clocks come from the Run projection (`GET /v1/runs/{runId}` on admission); a wait
 *   is answered with `POST /v1/runs/{runId}/waits/{waitId}`.
 *
 * - The admission origins it may call come from publication (`config.json`, beside this file,
 *   from `RUNPLANE_VIEWER_ADMISSION_ORIGINS`): an `?admission=` or a typed URL naming any other
 *   host is refused with a visible message and never called, so a link cannot make the page send
 *   the token elsewhere (docs/operations.md "The Run viewer"; the page's Content-Security-Policy `connect-src` lists the
 *   same origins, so the browser blocks it too).
 * - Once the settlement is shown, the clocks stop at the settlement time and say so.
 *
 * Text from the log is always inserted as text (`textContent`, text nodes), never as markup.
 */

const OWNERS = ['admission', 'runtime', 'tools', 'publication', 'recovery', 'lifecycle'];
const STORE = { admission: 'runplane.viewer.admission', token: 'runplane.viewer.token' };
const PAGE_SIZE = 20;
const RECEIPTS = ['succeeded', 'failed', 'denied', 'unknown'];

const $ = (id) => document.getElementById(id);

/**
 * Creates an element. `attrs`: `class`, `text` (textContent), `on<event>` handlers, `dataset`,
 * other attributes as strings (true: present). Children: nodes or strings (inserted as text).
 */
function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = shown(String(v));
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) e.append(c instanceof Node ? c : shown(String(c)));
  return e;
}

/** Bidirectional override and isolate characters (U+202A-U+202E, U+2066-U+2069), which admission refuses in a question. */
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;

/**
 * Text as it is shown: a bidirectional override or isolate character in a model's text or a
 * wait's question would reorder what follows it ("exe.txt" shown as "txt.exe"), so it is shown as
 * its code point (`⟦U+202E⟧`) instead of being obeyed.
 */
function shown(text) {
  return text.replace(BIDI_CONTROLS, (c) => `⟦U+${c.codePointAt(0).toString(16).toUpperCase()}⟧`);
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });

const timeText = (iso) => (iso ? new Date(iso).toLocaleString() : '—');
const durationText = (ms) => {
  if (ms === null || ms === undefined) return '—';
  const s = Math.round(Math.abs(ms) / 1000);
  const text = s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`;
  return text;
};
/** `s` cut to at most `n` characters (code points: an emoji is never split in two), with an ellipsis when cut. */
const cut = (s, n) => {
  const chars = Array.from(s);
  return chars.length > n ? `${chars.slice(0, n - 1).join('')}…` : s;
};

// ---- the server's configuration: the admission origins this page may call -------------------------

/** `config.json` as publication serves it: `{ admissionOrigins: string[] }` (the first the default). */
let viewerConfig = { admissionOrigins: [] };

/** Loads `config.json` (same origin, no token); on failure no admission is allowed. */
async function loadViewerConfig() {
  try {
    const res = await fetch(new URL('config.json', location.href), { cache: 'no-store' });
    const body = res.ok ? await res.json() : null;
    if (Array.isArray(body?.admissionOrigins)) viewerConfig = { admissionOrigins: body.admissionOrigins.filter((o) => typeof o === 'string') };
  } catch {
    // stays empty: the page says that no admission is configured
  }
}

/**
 * The admission base URL to use for `url` when it names one of the configured origins exactly
 * (`scheme://host[:port]`, trailing slashes ignored, no path), else null: the page never sends
 * the token to a host publication did not configure.
 */
function allowedAdmission(url) {
  let parsed;
  try {
    parsed = new URL(String(url).trim());
  } catch {
    return null;
  }
  if (parsed.pathname.replace(/\/+$/, '') !== '' || parsed.search || parsed.hash || parsed.username || parsed.password) return null;
  return viewerConfig.admissionOrigins.includes(parsed.origin) ? parsed.origin : null;
}

/** The configured admission to use by default: the one on this page's host name if there is one, else the first. */
function defaultAdmission() {
  const origins = viewerConfig.admissionOrigins;
  return origins.find((o) => new URL(o).hostname === location.hostname) ?? origins[0] ?? '';
}

/** Shows (or, with null, hides) why an admission URL was refused; stays until the next attempt. */
function refusal(text) {
  const p = $('admission-refused');
  p.textContent = text ?? '';
  p.hidden = !text;
}

function refusedText(url, how) {
  const allowed = viewerConfig.admissionOrigins;
  return allowed.length === 0
    ? `Refused ${how} ${url}: publication configures no admission for this viewer (RUNPLANE_VIEWER_ADMISSION_ORIGINS). Nothing was sent to it.`
    : `Refused ${how} ${url}: this viewer only calls the admission configured for it (${allowed.join(', ')}). Nothing was sent to it; your token stays here.`;
}

// ---- settings: admission URL and token (sessionStorage: this tab only) ---------------------------

function settings() {
  return {
    admission: (sessionStorage.getItem(STORE.admission) || '').replace(/\/+$/, ''),
    token: sessionStorage.getItem(STORE.token) || '',
  };
}

function authHeaders() {
  const { token } = settings();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** A refused API call: the HTTP status and the problem body (RFC 9457) when there is one. */
class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

/** Calls admission. @throws ApiError for a non-2xx answer; TypeError when it cannot be reached (or CORS refuses). */
async function admission(path, init = {}) {
  const base = allowedAdmission(settings().admission);
  if (!base) throw new ApiError(0, { detail: 'no configured admission to call (RUNPLANE_VIEWER_ADMISSION_ORIGINS on publication)' });
  const res = await fetch(`${base}${path}`, {
    ...init,
    headers: { Accept: 'application/json', ...authHeaders(), ...(init.headers || {}) },
  });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

function notice(text, kind = 'info') {
  const p = $('notice');
  p.textContent = text;
  p.dataset.kind = kind;
}

function explain(e, what) {
  if (e instanceof ApiError) {
    if (e.status === 401) return `${what}: the token was refused (${e.message}). Paste a valid token.`;
    return `${what}: ${e.message}`;
  }
  return `${what}: admission cannot be reached (${e.message}). Check the URL, and that admission allows this page's origin (RUNPLANE_CORS_ORIGINS).`;
}

// ---- the list of Runs -----------------------------------------------------------------------------

let nextCursor = null;

async function loadRuns({ more = false } = {}) {
  if (!more) nextCursor = null;
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (more && nextCursor) query.set('cursor', nextCursor);
  let page;
  try {
    page = await admission(`/v1/runs?${query}`);
  } catch (e) {
    notice(explain(e, 'The Runs could not be listed'), 'error');
    // rows read with a token that is refused now are not left on show as if they were current
    if (!more && e?.status === 401) {
      listShown = false;
      $('runs').replaceChildren();
      $('runs-empty').hidden = false;
      $('more').hidden = true;
    }
    return;
  }
  const body = $('runs');
  if (!more) body.replaceChildren();
  listShown = true;
  for (const run of page.runs) body.append(runRow(run));
  nextCursor = page.nextCursor;
  $('more').hidden = !nextCursor;
  $('runs-empty').hidden = body.children.length > 0;
  notice(`${body.children.length} Run(s) listed${nextCursor ? '; more below' : ''}.`);
}

/** How often the list's first page is read again while the page is visible, in ms. */
const LIST_REFRESH_MS = 5000;
let listRefreshFailed = false;
/** True once the list was read (a token connected, or none where authentication is off); false again when the token is forgotten. */
let listShown = false;

/**
 * Reads the list's first page again and merges it into the rows shown: a Run not listed yet is
 * added above the others (newest first), a listed Run's status and outcome are brought up to date,
 * and no row is removed (pages loaded with "more" stay). Quiet: it announces nothing when it
 * succeeds, and a failure once until a read succeeds again.
 */
async function refreshRuns() {
  if (document.visibilityState !== 'visible' || !listShown || viewerConfig.admissionOrigins.length === 0) return;
  let page;
  try {
    page = await admission(`/v1/runs?${new URLSearchParams({ limit: String(PAGE_SIZE) })}`);
  } catch (e) {
    if (!listRefreshFailed) notice(explain(e, 'The list of Runs could not be brought up to date'), 'error');
    listRefreshFailed = true;
    return;
  }
  listRefreshFailed = false;
  const body = $('runs');
  const rows = new Map([...body.children].map((r) => [r.dataset.runId, r]));
  const added = [];
  for (const run of page.runs) {
    const row = rows.get(run.runId);
    // a row this page saw settle (its event stream) keeps it: the projections follow the log, and a
    // refresh read while the projector lagged showed the Run running again (a loaded CI run's)
    if (row?.dataset.settledOutcome && run.status !== 'settled') continue;
    if (row) {
      row.children[1].textContent = run.status.replace('_', ' ');
      row.children[2].textContent = run.outcome ?? '—';
      row.children[2].className = run.outcome ? `outcome outcome-${run.outcome}` : '';
    } else added.push(runRow(run));
  }
  if (added.length > 0) {
    body.prepend(...added);
    // the count said above the list follows it (and new Runs are announced: the notice is a live region)
    notice(`${body.children.length} Run(s) listed${nextCursor ? '; more below' : ''}.`);
  }
  $('runs-empty').hidden = body.children.length > 0;
  // how many refreshes were merged (a test waits on it rather than on time)
  body.dataset.refreshes = String(Number(body.dataset.refreshes ?? 0) + 1);
}

function runRow(run) {
  return h(
    'tr',
    { dataset: { runId: run.runId } },
    h('td', {}, h('a', { href: `#run/${encodeURIComponent(run.runId)}`, class: 'run-link' }, cut(run.question, 140))),
    h('td', { text: run.status.replace('_', ' ') }),
    h('td', { text: run.outcome ?? '—', class: run.outcome ? `outcome outcome-${run.outcome}` : '' }),
    h('td', {}, h('time', { datetime: run.admittedAt, text: timeText(run.admittedAt) })),
  );
}

/**
 * The list's row of a Run this page saw settle shows the settlement (status and outcome): the list
 * is otherwise as last loaded, and a trial read a Run as running there beside its settlement.
 */
function markListedSettled(runId, outcome) {
  const row = [...$('runs').children].find((r) => r.dataset.runId === runId);
  if (!row) return;
  row.dataset.settledOutcome = outcome;
  row.children[1].textContent = 'settled';
  row.children[2].textContent = outcome;
  row.children[2].className = `outcome outcome-${outcome}`;
}

// ---- one Run, live --------------------------------------------------------------------------------

/** The Run being shown; replaced (and its stream aborted) when another one is opened. */
let current = null;

function newRunState(runId) {
  return {
    runId,
    abort: new AbortController(),
    lastId: 0,
    seen: new Set(),
    settled: false,
    /** When the Run settled (`run.settled`'s occurredAt): its clocks stop there. */
    settledAt: null,
    settledOutcome: null,
    reconnects: 0,
    view: null,
    viewTimer: null,
    passages: new Map(),
    tools: new Map(),
    waits: new Map(),
  };
}

function openRun(runId) {
  if (current?.runId === runId) return;
  current?.abort.abort();
  clearTimeout(current?.viewTimer);
  const run = (current = newRunState(runId));
  $('run').hidden = false;
  $('run-h').textContent = `Run ${runId}`;
  $('run-question').textContent = '';
  $('settlement').replaceChildren(h('p', { text: 'Not settled yet.' }));
  $('waits').replaceChildren();
  $('waits-none').hidden = false;
  $('passages').replaceChildren();
  $('passages-none').hidden = false;
  $('tools').replaceChildren();
  $('tools-none').hidden = false;
  $('budget').replaceChildren();
  $('stream-state').dataset.reconnects = '0';
  $('lanes').replaceChildren(
    ...OWNERS.map((owner) =>
      h(
        'section',
        { class: 'lane', 'aria-labelledby': `lane-${owner}-h` },
        h('h4', { id: `lane-${owner}-h`, text: owner }),
        h('ol', { id: `lane-${owner}`, class: 'events' }),
      ),
    ),
  );
  $('run-h').focus();
  void refreshView(run);
  void follow(run);
}

function closeRun() {
  current?.abort.abort();
  current = null;
  $('run').hidden = true;
}

function streamState(run, text, kind = 'info') {
  if (run !== current) return;
  const p = $('stream-state');
  p.textContent = text;
  p.dataset.kind = kind;
  p.dataset.reconnects = String(run.reconnects);
}

/**
 * Follows the Run's events until its settlement: one SSE request at a time, resumed from the last
 * event seen (`Last-Event-ID`) after a network error, a 5xx or a stream that ended early, with a
 * backoff of 0.5 s doubling to 4 s. Stops on 401/403/404 (nothing a retry would change).
 */
async function follow(run) {
  const url = new URL(`../v1/runs/${encodeURIComponent(run.runId)}/events`, location.href);
  let failures = 0;
  while (!run.settled && !run.abort.signal.aborted) {
    try {
      const headers = { Accept: 'text/event-stream', ...authHeaders() };
      if (run.lastId > 0) headers['Last-Event-ID'] = String(run.lastId);
      streamState(run, run.reconnects ? `Reconnecting (attempt ${run.reconnects})…` : 'Connecting…');
      const res = await fetch(url, { headers, signal: run.abort.signal, cache: 'no-store' });
      if (res.status === 204) {
        run.settled = true; // the settlement was seen before: nothing more will come
        break;
      }
      if ([401, 403, 404].includes(res.status)) {
        const problem = await res.json().catch(() => null);
        streamState(run, `The events cannot be read: ${problem?.detail ?? `HTTP ${res.status}`}.`, 'error');
        return;
      }
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      failures = 0;
      streamState(run, 'Following the Run live.');
      await readEvents(res.body, (message) => onMessage(run, message));
      if (!run.settled) throw new Error('the event stream ended before the settlement');
    } catch (e) {
      if (run.abort.signal.aborted) return;
      failures += 1;
      run.reconnects += 1;
      streamState(run, `The event stream was interrupted (${e.message}); reconnecting from event ${run.lastId}…`, 'warn');
      await sleep(Math.min(4000, 500 * 2 ** (failures - 1)), run.abort.signal);
    }
  }
  if (run.settled) {
    streamState(run, 'The Run is settled: every event is shown.', 'done');
    scheduleViewRefresh(run, 0);
  }
}

/**
 * Reads Server-Sent Events from a response body and calls `onMessage({id, event, data})` for each
 * message with data (comments and keep-alives are skipped). Resolves when the stream ends.
 */
async function readEvents(body, onMessage) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let message = { id: null, event: 'message', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (message.data.length > 0) onMessage({ id: message.id, event: message.event, data: message.data.join('\n') });
        message = { id: null, event: 'message', data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'data') message.data.push(value);
      else if (field === 'event') message.event = value;
      else if (field === 'id') message.id = value;
    }
  }
}

function onMessage(run, message) {
  if (run !== current || message.id === null) return;
  const seq = Number(message.id);
  if (!Number.isSafeInteger(seq) || run.seen.has(seq)) return;
  let event;
  try {
    event = JSON.parse(message.data);
  } catch {
    return;
  }
  run.seen.add(seq);
  run.lastId = Math.max(run.lastId, seq);
  try {
    laneEntry(seq, event);
    apply(run, seq, event);
  } catch (e) {
    // one event the page cannot show must not stop the stream (it is in the log all the same)
    console.error(`event #${seq} (${event.type}) could not be shown`, e);
  }
  scheduleViewRefresh(run, 1000);
}

function laneEntry(seq, event) {
  const lane = $(`lane-${OWNERS.includes(event.owner) ? event.owner : 'lifecycle'}`);
  lane.append(
    h(
      'li',
      { dataset: { seq: String(seq), type: event.type } },
      h('span', { class: 'seq', text: `#${seq}` }),
      ' ',
      h('time', { datetime: event.occurredAt, text: new Date(event.occurredAt).toLocaleTimeString() }),
      ' ',
      eventName(event.type),
      summaryOf(event) ? h('span', { class: 'summary', text: ` ${summaryOf(event)}` }) : null,
    ),
  );
}

/**
 * An event's type as a name that wraps only after its dots (`passage.` `committed`): each segment
 * is followed by a `<wbr>` and the name's box never breaks inside a word. A segment wider than
 * its lane is cut with an ellipsis; the full name stays in the text and in its title.
 */
function eventName(type) {
  const segments = String(type).split('.');
  const parts = segments.flatMap((seg, i) => (i < segments.length - 1 ? [`${seg}.`, h('wbr')] : [seg]));
  return h('strong', { class: 'event-type', title: type }, ...parts);
}

/** A few words about an event for its lane (from its data, as text). */
function summaryOf(e) {
  const d = e.data ?? {};
  switch (e.type) {
    case 'model.turn.requested':
      return `turn ${d.turn}${d.purpose ? ` (${d.purpose})` : ''}`;
    case 'model.turn.completed':
      return `turn ${d.turn}: ${d.toolCalls?.length ?? 0} tool call(s), finish ${d.finishReason}`;
    case 'model.turn.failed':
      return `turn ${d.turn}: ${d.error?.kind ?? 'failed'}`;
    case 'tool.call.proposed':
    case 'tool.call.dispatched':
      return d.name;
    case 'tool.call.receipt':
      return `${d.name}: ${d.status}`;
    case 'passage.committed':
      return `passage ${d.index + 1} of turn ${d.sourceTurn}, v${d.version}`;
    case 'wait.opened':
      return cut(d.question ?? '', 80);
    case 'wait.answered':
      return `by ${d.answeredBy ?? 'someone'}`;
    case 'run.fenced':
      return `${d.fencedSubject}: ${d.reason}`;
    case 'run.execution.finished':
    case 'run.settled':
      return [d.outcome, d.reason].filter(Boolean).join(': ');
    case 'run.cancel.requested':
      return `by ${d.requestedBy ?? 'someone'}`;
    default:
      return '';
  }
}

function apply(run, seq, e) {
  const d = e.data ?? {};
  switch (e.type) {
    case 'run.admitted':
      $('run-question').textContent = shown(d.message?.content ?? '');
      break;
    case 'passage.committed':
      showPassage(run, d);
      break;
    case 'tool.call.proposed':
      updateTool(run, d.toolCallId, { name: d.name, argumentsText: d.argumentsText });
      break;
    case 'tool.call.dispatched':
      // a receipt read first (never in stream order, but cheap to respect) is not undone
      updateTool(run, d.toolCallId, {
        name: d.name,
        status: RECEIPTS.includes(run.tools.get(d.toolCallId)?.status) ? run.tools.get(d.toolCallId).status : 'dispatched',
      });
      break;
    case 'tool.call.receipt':
      updateTool(run, d.toolCallId, { name: d.name, status: d.status, error: d.error, durationMs: d.durationMs, reusedFrom: d.reusedFrom });
      break;
    case 'tool.call.late_observed':
      updateTool(run, d.toolCallId, { late: { status: d.status, at: e.occurredAt } });
      break;
    case 'tool.call.reconciled':
      updateTool(run, d.toolCallId, { reconciled: { outcome: d.outcome, operator: d.operator, evidence: d.evidence } });
      break;
    case 'wait.opened':
      showWait(run, d);
      break;
    case 'wait.answered':
      waitAnswered(run, d);
      break;
    case 'run.settled':
      run.settled = true;
      run.settledAt = e.occurredAt;
      run.settledOutcome = d.outcome;
      showSettlement(e);
      closeOpenWaits(run, d.outcome);
      renderView(run);
      markListedSettled(run.runId, d.outcome);
      break;
    default:
      break;
  }
}

// ---- passages -------------------------------------------------------------------------------------

function showPassage(run, d) {
  const known = run.passages.get(d.passageId);
  if (known && known.version >= d.version) return;
  run.passages.set(d.passageId, d);
  const list = $('passages');
  const existing = [...list.children].find((li) => li.dataset.passageId === d.passageId);
  const li = h('li', { class: 'passage', dataset: { passageId: d.passageId, version: String(d.version), sourceTurn: String(d.sourceTurn) } }, d.text);
  if (existing) existing.replaceWith(li);
  else {
    // in the order of the answer: source turn, then index
    const after = [...list.children].find((x) => {
      const p = run.passages.get(x.dataset.passageId);
      return p && (p.sourceTurn > d.sourceTurn || (p.sourceTurn === d.sourceTurn && p.index > d.index));
    });
    list.insertBefore(li, after ?? null);
  }
  $('passages-none').hidden = true;
}

// ---- tool calls -----------------------------------------------------------------------------------

function updateTool(run, toolCallId, patch) {
  const tool = { toolCallId, status: 'proposed', ...run.tools.get(toolCallId), ...patch };
  run.tools.set(toolCallId, tool);
  const row = toolRow(tool);
  const existing = [...$('tools').children].find((tr) => tr.dataset.toolCallId === toolCallId);
  if (existing) existing.replaceWith(row);
  else $('tools').append(row);
  $('tools-none').hidden = true;
}

/** What a call's outcome cell says, in words (never by colour alone): the receipt, or pending. */
const PENDING = {
  proposed: 'proposed, not dispatched yet',
  dispatched: 'dispatched, no receipt yet',
};

/**
 * A tool call's row. Its outcome is said in words, so that its accessible name carries it too:
 * a call without a receipt is "Pending", a receipt `unknown` is "Unknown outcome" (K5: the effect
 * may or may not have happened; never shown as a success), other receipts by their status.
 */
function toolRow(t) {
  const unknown = t.status === 'unknown';
  const pending = PENDING[t.status];
  const icon = (glyph) => h('span', { 'aria-hidden': 'true', text: `${glyph} ` });
  const outcome = unknown
    ? h(
        'span',
        { class: 'status status-unknown' },
        icon('⚠'),
        h('strong', { text: 'Unknown outcome' }),
        ': the call may or may not have taken effect; it is never run again on its own (K5).',
      )
    : pending
      ? h('span', { class: 'status status-pending' }, icon('◷'), h('strong', { text: 'Pending' }), `: ${pending}.`)
      : h('span', { class: `status status-${t.status}`, text: t.status });
  const details = [];
  if (t.durationMs !== undefined) details.push(`${Math.round(t.durationMs)} ms`);
  if (t.error) details.push(`${t.error.code}: ${t.error.message}`);
  if (t.reusedFrom) details.push(`result reused from Run ${t.reusedFrom.runId}`);
  if (t.late) details.push(`later observed: ${t.late.status} (${timeText(t.late.at)})`);
  if (t.reconciled) details.push(`reconciled by ${t.reconciled.operator}: ${t.reconciled.outcome} — ${t.reconciled.evidence}`);
  return h(
    'tr',
    { dataset: { toolCallId: t.toolCallId, status: t.status }, class: unknown ? 'row-unknown' : pending ? 'row-pending' : '' },
    h('td', {}, h('strong', { text: t.name ?? '?' }), h('br'), h('code', { class: 'id', text: t.toolCallId })),
    h('td', {}, h('code', { class: 'args', text: cut(t.argumentsText ?? '', 200) })),
    h('td', {}, outcome),
    h('td', { text: details.join('; ') || '—' }),
  );
}

// ---- waits (K10) ----------------------------------------------------------------------------------

function showWait(run, d) {
  if (run.waits.has(d.waitId)) return;
  const ids = { q: `wait-q-${d.waitId}`, a: `wait-a-${d.waitId}`, x: `wait-x-${d.waitId}`, r: `wait-r-${d.waitId}` };
  const result = h('p', { id: ids.r, class: 'wait-result', role: 'status', tabindex: '-1' });
  const textarea = h('textarea', {
    id: ids.a,
    name: 'answer',
    required: true,
    maxlength: '20000',
    rows: '3',
    'aria-describedby': `${ids.q} ${ids.x}`,
  });
  const button = h('button', { type: 'submit', text: 'Send the answer' });
  const form = h(
    'form',
    { class: 'wait card-inner', dataset: { waitId: d.waitId } },
    h('p', { id: ids.q, class: 'question' }, d.question),
    h('label', { for: ids.a, text: 'Your answer' }),
    textarea,
    h('p', { id: ids.x, class: 'help' }, 'Answer before ', h('time', { datetime: d.expiresAt, text: timeText(d.expiresAt) }), '.'),
    button,
    result,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const answer = textarea.value;
    if (!answer.trim()) {
      result.textContent = 'Write an answer first.';
      textarea.focus();
      return;
    }
    // a disabled button drops the focus to the page's body: it moves to the form's result instead
    const hadFocus = document.activeElement === button;
    button.disabled = true;
    result.textContent = 'Sending…';
    if (hadFocus) result.focus();
    try {
      const recorded = await admission(`/v1/runs/${encodeURIComponent(run.runId)}/waits/${encodeURIComponent(d.waitId)}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ answer }),
      });
      result.textContent = recorded.recording === 'recorded' ? 'Answer recorded: the Run continues.' : 'This answer was recorded before.';
      textarea.disabled = true;
    } catch (e) {
      button.disabled = false;
      result.textContent = explain(e, 'The answer was not recorded');
    }
  });
  run.waits.set(d.waitId, { form, d });
  $('waits').append(form);
  $('waits-none').hidden = true;
}

/**
 * A settled Run's questions that were not answered can no longer be: their forms become a closed
 * note (admission would refuse an answer with 409), instead of offering a form that fails.
 */
function closeOpenWaits(run, outcome) {
  for (const [waitId, wait] of run.waits) {
    if (wait.form.tagName !== 'FORM') continue;
    const hadFocus = wait.form.contains(document.activeElement);
    const closed = h(
      'div',
      { class: 'wait closed card-inner', dataset: { waitId, status: 'closed' }, tabindex: '-1' },
      h('p', { class: 'question' }, wait.d.question),
      h('p', { text: `Not answered: the Run settled ${outcome}, and this question can no longer be answered.` }),
    );
    wait.form.replaceWith(closed);
    run.waits.set(waitId, { form: closed, d: wait.d });
    if (hadFocus) closed.focus();
  }
}

function waitAnswered(run, d) {
  const wait = run.waits.get(d.waitId);
  const done = h(
    'div',
    { class: 'wait answered card-inner', dataset: { waitId: d.waitId, status: 'answered' }, tabindex: '-1' },
    h('p', { class: 'question' }, wait?.d.question ?? ''),
    h('p', {}, h('strong', { text: `Answered by ${d.answeredBy ?? 'someone'}: ` }), d.answer),
  );
  // the focus, in the form that is replaced (its button, just pressed), moves to what replaces it
  const hadFocus = wait?.form.contains(document.activeElement) ?? false;
  if (wait) wait.form.replaceWith(done);
  if (hadFocus) done.focus();
  else $('waits').append(done);
  run.waits.set(d.waitId, { form: done, d: wait?.d ?? d });
  $('waits-none').hidden = true;
}

// ---- settlement -----------------------------------------------------------------------------------

function showSettlement(e) {
  const d = e.data;
  const u = d.usage ?? {};
  const unknownTurns = u.unknownUsageTurns ?? 0;
  const tokens =
    unknownTurns === 0
      ? `${u.promptTokens} prompt + ${u.completionTokens} completion tokens`
      : `at least ${u.promptTokens} prompt + ${u.completionTokens} completion tokens (usage unknown for ${unknownTurns} request(s))`;
  const unknownReceipts = (d.receipts ?? []).filter((r) => r.status === 'unknown');
  const parts = [
    h(
      'p',
      { class: `outcome outcome-${d.outcome}`, id: 'settled-outcome', dataset: { outcome: d.outcome } },
      h('strong', { text: `Settled ${d.outcome}` }),
      ` — ${d.reason}`,
    ),
    h(
      'p',
      {},
      `At ${timeText(e.occurredAt)}: ${u.modelRequests} model request(s), ${u.toolCalls} tool call(s), ${tokens}; ${d.passageIds.length} passage(s) in the answer.`,
    ),
    unknownReceipts.length
      ? h(
          'p',
          { class: 'status-unknown' },
          h('span', { 'aria-hidden': 'true', text: '⚠ ' }),
          `${unknownReceipts.length} tool call(s) ended with an unknown outcome.`,
        )
      : null,
    d.unanswered?.length
      ? h(
          'div',
          {},
          h('p', { text: 'Not answered:' }),
          h(
            'ul',
            {},
            d.unanswered.map((p) => h('li', {}, h('strong', { text: p.part }), ` — ${p.reason}`)),
          ),
        )
      : null,
  ];
  // replaceChildren would insert a null as the text "null"
  $('settlement').replaceChildren(...parts.filter((p) => p !== null));
}

// ---- budget and clocks (the Run projection) -------------------------------------------------------

function scheduleViewRefresh(run, delayMs) {
  if (run.viewTimer) return;
  run.viewTimer = setTimeout(() => {
    run.viewTimer = null;
    void refreshView(run);
  }, delayMs);
}

async function refreshView(run) {
  try {
    run.view = await admission(`/v1/runs/${encodeURIComponent(run.runId)}`);
  } catch (e) {
    // not projected yet, or admission unreachable for a moment: the next event refreshes it again
    if (!(e instanceof ApiError && e.problem?.code === 'not_projected_yet')) {
      if (run === current) $('budget').replaceChildren(h('dt', { text: 'Projection' }), h('dd', { text: explain(e, 'not available') }));
    }
    return;
  }
  renderView(run);
  // the projection follows the log: after the settlement, ask again until it shows it (30 s at most)
  if (run.settled && run.view.status !== 'settled' && (run.viewRetries = (run.viewRetries ?? 0) + 1) <= 30) scheduleViewRefresh(run, 1000);
}

/**
 * Renders budget and clocks from the projection. While the Run is live its clocks run on the
 * browser's time (re-rendered every second); once it is settled (the projection's `settledAt`, or
 * the `run.settled` event already shown) every clock is taken at the settlement time instead, so
 * nothing ticks any more, and the "Clocks" row says they stopped.
 */
function renderView(run) {
  const v = run.view;
  if (!v || run !== current) return;
  const settledAt = run.settledAt ?? v.settledAt;
  const stopped = Boolean(settledAt);
  const now = stopped ? Date.parse(settledAt) : Date.now();
  const limit = (used, max) => (max === null || max === undefined ? `${used} (no limit)` : `${used} of ${max}`);
  const since = (iso) => durationText(now - Date.parse(iso));
  const deadline = () => {
    const at = Date.parse(v.deadlineAt);
    if (!stopped) return `${timeText(v.deadlineAt)} (${at > now ? `in ${durationText(at - now)}` : 'passed'})`;
    return `${timeText(v.deadlineAt)} (${at > now ? `not reached: settled ${durationText(at - now)} before it` : 'passed before the settlement'})`;
  };
  const rows = [
    // the log's settlement, when the page has shown it, before the projection catches up
    [
      'Status',
      stopped && v.status !== 'settled'
        ? `settled (${run.settledOutcome ?? v.outcome ?? '?'})`
        : `${v.status.replace('_', ' ')}${v.outcome ? ` (${v.outcome})` : ''}`,
    ],
    ['Clocks', stopped ? `stopped at the settlement (${timeText(settledAt)})` : 'running (updated every second)'],
    [
      'Model requests',
      `${limit(v.modelRequests, v.maxModelRequests)}${v.reserveModelRequests ? `, ${v.reserveModelRequests} kept for the final answer` : ''}`,
    ],
    ['Tool calls', limit(v.toolCalls, v.maxToolCalls)],
    ['Input tokens', limit(v.promptTokens, v.maxInputTokens)],
    ['Output tokens', limit(v.completionTokens, v.maxOutputTokens)],
    ['Usage unknown', v.unknownUsageTurns === 0 ? 'none' : `${v.unknownUsageTurns} model request(s), not counted as 0 tokens`],
    ['Admitted', timeText(v.admittedAt)],
    ['Queued', v.startedAt ? durationText(v.queuedMs) : stopped ? `${since(v.admittedAt)}, never started` : `${since(v.admittedAt)} so far`],
    [
      'Executing',
      v.executionEndedAt && v.executingMs !== null && v.executingMs !== undefined
        ? durationText(v.executingMs)
        : v.startedAt
          ? stopped
            ? `${since(v.startedAt)} until the settlement`
            : `${since(v.startedAt)} so far`
          : 'not started',
    ],
    [
      'Last progress',
      v.lastProgressAt
        ? stopped
          ? `${since(v.lastProgressAt)} before the settlement`
          : `${since(v.lastProgressAt)} ago${v.noProgressSeconds ? ` (the Run ends after ${durationText(v.noProgressSeconds * 1000)} without progress)` : ''}`
        : '—',
    ],
    ['Deadline', v.deadlineAt ? deadline() : 'none'],
    ['Settled', timeText(settledAt)],
  ];
  const budget = $('budget');
  budget.replaceChildren(...rows.flatMap(([k, val]) => [h('dt', { text: k }), h('dd', { text: val })]));
  budget.dataset.clocks = stopped ? 'stopped' : 'running';
  // the projection's own status (it follows the log: settled there a moment after the page shows it)
  budget.dataset.projected = v.status;
  budget.dataset.renders = String(Number(budget.dataset.renders ?? 0) + 1);
}

// ---- wiring -----------------------------------------------------------------------------------------

function route() {
  const m = /^#run\/([A-Za-z0-9_-]{1,128})$/.exec(location.hash);
  if (m) openRun(decodeURIComponent(m[1]));
  else if (location.hash === '' || location.hash === '#') closeRun();
  else if (location.hash.startsWith('#run/')) {
    closeRun();
    notice('The link does not name a Run: a Run id is 1 to 128 letters, digits, "-" or "_".', 'error');
  }
}

async function init() {
  await loadViewerConfig();
  const params = new URLSearchParams(location.search);
  const given = params.get('admission');
  if (given !== null) {
    const allowed = allowedAdmission(given);
    if (allowed) sessionStorage.setItem(STORE.admission, allowed);
    else refusal(refusedText(given, "the link's admission"));
  }
  // a URL kept from before (another configuration) is used only while it is still allowed
  if (!allowedAdmission(settings().admission)) sessionStorage.setItem(STORE.admission, defaultAdmission());
  $('admission-url').value = settings().admission;
  $('token').value = settings().token;
  $('admission-origins').replaceChildren(...viewerConfig.admissionOrigins.map((o) => h('option', { value: o })));

  $('connect').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const typed = $('admission-url').value.trim();
    const allowed = allowedAdmission(typed);
    if (!allowed) {
      refusal(refusedText(typed, 'the admission URL'));
      $('admission-url').focus();
      return;
    }
    refusal(null);
    sessionStorage.setItem(STORE.admission, allowed);
    sessionStorage.setItem(STORE.token, $('token').value.trim());
    void loadRuns();
    if (current) {
      const id = current.runId;
      current.abort.abort();
      current = null;
      openRun(id);
    }
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(STORE.token);
    $('token').value = '';
    // what the token showed goes with it: the list, and the Run open with it (its stream stopped)
    $('runs').replaceChildren();
    $('runs-empty').hidden = false;
    $('more').hidden = true;
    nextCursor = null;
    listShown = false;
    if (current) {
      window.history.replaceState(null, '', location.pathname + location.search);
      closeRun();
    }
    notice('The token is forgotten, and what it showed is cleared.');
  });
  // the form is wired and filled: what is typed from now on is kept and submitted here
  $('connect').removeAttribute('aria-busy');
  $('refresh').addEventListener('click', () => void loadRuns());
  $('more').addEventListener('click', () => void loadRuns({ more: true }));
  window.addEventListener('hashchange', route);
  // the relative clocks move on their own
  setInterval(() => current && renderView(current), 1000);
  // the list follows new Runs and settlements on its own (and at once when the tab is shown again)
  setInterval(() => void refreshRuns(), LIST_REFRESH_MS);
  document.addEventListener('visibilitychange', () => void refreshRuns());

  if (viewerConfig.admissionOrigins.length === 0)
    notice('Publication configures no admission for this viewer (RUNPLANE_VIEWER_ADMISSION_ORIGINS): the Runs cannot be listed.', 'error');
  else if (settings().token) void loadRuns();
  else notice('Paste a bearer token and connect (with authentication disabled, connect without one).');
  route();
}

void init();
