/**
 * Conversation flows end to end through the real HTTP API and CLI (K1, K2, K3), with nothing
 * forged: every event is produced by the service that owns it. One stack (real processes, NATS
 * JetStream, PostgreSQL, the scripted model over HTTP, the holdings data under
 * ../shared/data/etf-holdings when present), asserting on the requests the model really received
 * (`/_scripted/stats` bodies):
 * - clarification: the model's `ask_clarification` settles the Run `completed` with the question
 *   published and pending; a reply (`replyTo`, via the CLI `reply`) is a new Run linked
 *   `clarification` whose model request carries the original request and the question, labelled,
 *   and the chosen answer last; the same reply again is 200 with the same ids, another one 409;
 * - Continue: a parent that settles `partial` after several tool calls is continued
 *   (`continuationOfRunId`, and once via the CLI `continue`); the new Run's first request carries
 *   the parent's request, passages, tool results with provenance and as-of dates and its open
 *   questions, labelled historical, the new text last; no tool of the parent runs again and the
 *   parent's stream gains nothing;
 * - follow-up: a plain second message of the conversation carries the earlier questions and
 *   committed passages as labelled history, with its own fresh grant and limits.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import type { WireMessage } from '@runplane/app-scripted-model';
import { repoRoot } from '@runplane/devstack';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { eventually, settledRunOf, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('flow', {}, { audit: 'strict' });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

type Json = Record<string, unknown>;
type Body = { messages: WireMessage[] };
const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];
const textOf = (m: WireMessage): string => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? ''));
const systemOf = (b: Body): string[] => b.messages.filter((m) => m.role === 'system').map(textOf);
const userOf = (b: Body): string[] => b.messages.filter((m) => m.role === 'user').map(textOf);

/** POSTs a message as JSON through the admission HTTP API; returns the status and JSON body. */
async function post(conversationId: string, body: Json): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${t.stack.endpoints.admission}/v1/conversations/${conversationId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

/** The chat requests the scripted model received whose user message contains `key`, in arrival order. */
async function requestsWith(key: string): Promise<Body[]> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  const stats = (await res.json()) as { bodies: Body[] };
  return stats.bodies.filter((b) => typeof b === 'object' && b.messages?.some((m) => m.role === 'user' && textOf(m).includes(key)));
}

/** Runs the CLI (apps/cli/dist/main.js) against this stack; resolves with its exit status and output. */
function cli(args: string[]): Promise<{ status: number; out: string }> {
  const env = { ...t.env, RUNPLANE_ADMISSION_URL: t.stack.endpoints.admission, RUNPLANE_PUBLICATION_URL: t.stack.endpoints.publication };
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(repoRoot(), 'apps/cli/dist/main.js'), ...args],
      { env, encoding: 'utf8', timeout: 90_000 },
      (error, stdout, stderr) => resolve({ status: error ? Number((error as { code?: unknown }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

/** The Run id the CLI printed (`Run <id> admitted...`). */
const printedRunId = (out: string): string => /Run (\S+) (?:admitted|already admitted)/.exec(out)?.[1] ?? '';

describe('clarification through the API and the CLI (K2)', () => {
  it('ask_clarification settles completed with the question pending; the CLI reply starts a linked Run whose request carries the original request, the question and the answer; the same reply 200, another 409', async () => {
    const conv = 'flow-clarify';
    const key = 'flow-clar-ask';
    const question = 'Do you mean cumulative or annualized returns?';
    await t.setScenario(
      { steps: [{ reply: { content: '', toolCalls: [{ name: 'ask_clarification', arguments: { question } }] } }], then: 'error' },
      key,
    );
    const request = `[${key}] Compare the returns of SPY and QQQ`;
    const asked = await post(conv, { clientMessageId: key, content: request });
    expect(asked.status).toBe(201);
    const askRunId = asked.body.runId as string;
    const askEvents = await t.waitForSettlement(askRunId);
    const [requested] = ofType(askEvents, 'clarification.requested');
    expect(requested?.event.data.question).toBe(question);
    const clarificationId = requested!.event.data.clarificationId;
    expect(ofType(askEvents, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    expect((await t.client.getAnswer(askRunId)).passages.map((p) => p.text)).toEqual([question]);
    const view = await eventually(async () => {
      const v = await t.client.getRun(askRunId);
      return v?.status === 'settled' && v.clarificationId ? v : null;
    });
    expect(view.clarificationId).toBe(clarificationId);
    // the CLI shows the question with the command that answers it
    const watched = await cli(['watch', askRunId]);
    // pasteable: from the checkout, against this stack's services (`runplane` is no command on the PATH)
    const services = `--admission ${t.stack.endpoints.admission} --publication ${t.stack.endpoints.publication}`;
    expect(watched.out).toContain(`npm run runplane -- reply ${services} ${askRunId} ${clarificationId} "<text>"`);
    // and `ask` prints the answer (the question), the settlement, then that command, exiting 0 (completed)
    const cliKey = 'flow-clar-ask-cli';
    await t.setScenario(
      { steps: [{ reply: { content: '', toolCalls: [{ name: 'ask_clarification', arguments: { question } }] } }], then: 'error' },
      cliKey,
    );
    const askedCli = await cli(['ask', `[${cliKey}] Compare the returns of SPY and QQQ`, '--conversation', `${conv}-cli`, '--message-id', cliKey]);
    expect(askedCli.status).toBe(0);
    const cliRunId = printedRunId(askedCli.out);
    const cliClarificationId = ofType(await t.waitForSettlement(cliRunId), 'clarification.requested')[0]!.event.data.clarificationId;
    const hint = `reply with: npm run runplane -- reply ${services} ${cliRunId} ${cliClarificationId} "<text>"`;
    expect(askedCli.out).toContain(hint);
    expect(askedCli.out.indexOf(hint)).toBeGreaterThan(askedCli.out.indexOf(question));
    expect(askedCli.out.indexOf(hint)).toBeGreaterThan(askedCli.out.indexOf('completed'));
    // asked again with the same conversation and message id: nothing new admitted, the same Run followed (K1)
    const again = await cli(['ask', `[${cliKey}] Compare the returns of SPY and QQQ`, '--conversation', `${conv}-cli`, '--message-id', cliKey]);
    expect([again.status, printedRunId(again.out)]).toEqual([0, cliRunId]);
    expect(again.out).toContain(`Run ${cliRunId} already admitted (conversation ${conv}-cli, message ${cliKey})`);

    // the reply, through the CLI: 201, a new Run linked `clarification`
    const replyKey = 'flow-clar-reply';
    await t.setScenario({ steps: [{ reply: { content: 'Annualized: SPY and QQQ compared on annualized returns.' } }], then: 'error' }, replyKey);
    const reply = `[${replyKey}] Annualized`;
    const viaCli = await cli(['reply', askRunId, clarificationId, reply, '--conversation', conv, '--message-id', replyKey, '--no-follow']);
    expect(viaCli.status).toBe(0);
    expect(viaCli.out).toMatch(new RegExp(`admitted, answering clarification ${clarificationId} of run ${askRunId}`));
    const replyRunId = printedRunId(viaCli.out);
    expect(replyRunId).not.toBe('');
    const replyEvents = await t.waitForSettlement(replyRunId);
    const admitted = ofType(replyEvents, 'run.admitted')[0]!.event.data;
    expect(admitted.link).toEqual({ parentRunId: askRunId, relation: 'clarification' });
    expect(admitted.clarification).toMatchObject({ clarificationId, question, originalRequest: request });
    expect(ofType(replyEvents, 'run.settled')[0]!.event.data.outcome).toBe('completed');

    // the request the model received for the reply Run
    const [first] = await requestsWith(replyKey);
    expect(first).toBeDefined();
    expect(first!.messages.at(-1)).toMatchObject({ role: 'user', content: reply });
    expect(userOf(first!)).toEqual([reply]);
    const system = systemOf(first!);
    expect(system).toContain(`[clarification, historical] The original request (quoted): ${JSON.stringify(request)}`);
    expect(system.some((s) => s.startsWith('[clarification, historical]') && s.includes(question))).toBe(true);

    // the same reply again (the HTTP API): 200 with the same ids; another answer: 409, nothing created
    const same = await post(conv, { clientMessageId: replyKey, content: reply, replyTo: { runId: askRunId, clarificationId } });
    expect(same.status).toBe(200);
    expect(same.body).toMatchObject({ runId: replyRunId, link: { parentRunId: askRunId, relation: 'clarification' } });
    const other = await post(conv, { clientMessageId: 'flow-clar-other', content: 'Cumulative', replyTo: { runId: askRunId, clarificationId } });
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({ code: 'clarification_answered' });
    expect(ofType(await t.log.readRun(replyRunId), 'run.admitted')).toHaveLength(1);
    // the asking Run is never reopened
    expect((await t.log.readRun(askRunId)).map((e) => e.event.eventId)).toEqual(askEvents.map((e) => e.event.eventId));
  }, 120_000);
});

describe('a clarification answered through the HTTP API (K2)', () => {
  it('POST replyTo: 201, a Run linked clarification whose last user message is the answer, after the labelled request and question', async () => {
    const conv = 'flow-clarify-http';
    const key = 'flow-clar-ask-http';
    const question = 'Which year do you mean?';
    await t.setScenario(
      { steps: [{ reply: { content: '', toolCalls: [{ name: 'ask_clarification', arguments: { question } }] } }], then: 'error' },
      key,
    );
    const request = `[${key}] What did QQQ hold that year?`;
    const asked = await post(conv, { clientMessageId: key, content: request });
    const askRunId = asked.body.runId as string;
    const askEvents = await t.waitForSettlement(askRunId);
    const clarificationId = ofType(askEvents, 'clarification.requested')[0]!.event.data.clarificationId;

    const replyKey = 'flow-clar-reply-http';
    await t.setScenario({ steps: [{ reply: { content: 'In 2024, QQQ held about 100 names.' } }], then: 'error' }, replyKey);
    const reply = `[${replyKey}] 2024`;
    const res = await post(conv, { clientMessageId: replyKey, content: reply, replyTo: { runId: askRunId, clarificationId } });
    expect(res.status).toBe(201);
    expect(res.body.link).toEqual({ parentRunId: askRunId, relation: 'clarification' });
    const events = await t.waitForSettlement(res.body.runId as string);
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    const [first] = await requestsWith(replyKey);
    expect(first!.messages.at(-1)).toMatchObject({ role: 'user', content: reply });
    expect(userOf(first!)).toEqual([reply]);
    const system = systemOf(first!);
    expect(system).toContain(`[clarification, historical] The original request (quoted): ${JSON.stringify(request)}`);
    expect(system.some((s) => s.startsWith('[clarification, historical]') && s.includes(question))).toBe(true);
    expect((await t.log.readRun(askRunId)).map((e) => e.event.eventId)).toEqual(askEvents.map((e) => e.event.eventId));
  }, 90_000);
});

describe('Continue and a follow-up in one conversation (K2, K3)', () => {
  const conv = 'flow-continue';
  const parentKey = 'flow-parent';
  const parentRequest = `[${parentKey}] Compare the holdings of SPY, QQQ and VGT`;
  const GAPS = [{ part: 'holdings of VGT', reason: 'no holdings file for VGT in the data' }];
  const preamble = 'SPY and QQQ holdings are read from their files first.';
  const finalText = 'SPY and QQQ share most of their largest holdings.';
  let parentRunId = '';
  let parentEvents: StoredEvent[] = [];

  beforeAll(async () => {
    ({ runId: parentRunId, events: parentEvents } = await settledRunOf(t, conv, parentKey, parentRequest, {
      steps: [
        {
          reply: {
            content: `${preamble}\n\n`,
            toolCalls: [
              { name: 'get_holdings', arguments: { fund: 'SPY', top: 5 } },
              { name: 'get_holdings', arguments: { fund: 'QQQ', top: 5 } },
            ],
          },
        },
        { reply: { content: '', toolCalls: [{ name: 'get_holdings', arguments: { fund: 'SPY', top: 8 } }] } },
        {
          reply: {
            content: `${finalText}\n\nNot answered: holdings of VGT.\n\`\`\`json runplane-unanswered\n${JSON.stringify({ unanswered: GAPS })}\n\`\`\``,
          },
        },
      ],
      then: 'error',
    }));
    expect(ofType(parentEvents, 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'partial', unanswered: GAPS });
    expect(ofType(parentEvents, 'tool.call.receipt').map((e) => [e.event.data.name, e.event.data.status])).toEqual([
      ['get_holdings', 'succeeded'],
      ['get_holdings', 'succeeded'],
      ['get_holdings', 'succeeded'],
    ]);
    // the projection lags the log: later steps read the parent from the API
    await eventually(async () => ((await t.client.getRun(parentRunId))?.status === 'settled' ? true : null));
  }, 90_000);

  it('POST continuationOfRunId: 201, a linked Run whose first request carries the parent material labelled historical and the new text last; nothing of the parent runs again; the parent stream gains nothing', async () => {
    const key = 'flow-continue-http';
    await t.setScenario({ steps: [{ reply: { content: 'Continued: VGT has only a fact sheet, so its holdings stay open.' } }], then: 'error' }, key);
    const text = `[${key}] Continue, and say what is missing for VGT`;
    const res = await post(conv, { clientMessageId: key, content: text, continuationOfRunId: parentRunId });
    expect(res.status).toBe(201);
    expect(res.body.link).toEqual({ parentRunId, relation: 'continuation' });
    const runId = res.body.runId as string;
    const events = await t.waitForSettlement(runId, 60_000);
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('completed');

    const [first] = await requestsWith(key);
    expect(first).toBeDefined();
    expect(first!.messages.at(-1)).toMatchObject({ role: 'user', content: text });
    expect(userOf(first!)).toEqual([text]);
    const system = systemOf(first!);
    const labelled = (s: string) => s.startsWith('[continuation, historical');
    // the parent's request, verified; its committed passages; its tool results with provenance and as-of dates; its open questions
    expect(system.some((s) => labelled(s) && s.includes(`This Run continues Run ${parentRunId}`) && s.includes(parentRequest))).toBe(true);
    // the parent's committed answer passages, as its answer serves them (a passage committed in a tool turn before
    // the answer was published is not part of the answer: the runtime carries what the answer endpoint serves)
    const passages = (await t.client.getAnswer(parentRunId)).passages.map((p) => p.text);
    expect(passages).toEqual([finalText, 'Not answered: holdings of VGT.']);
    for (const p of passages)
      expect(system.some((s) => labelled(s) && s.includes(`Passage committed by Run ${parentRunId} (quoted): ${JSON.stringify(p)}`))).toBe(true);
    const results = system.filter((s) => s.startsWith('[continuation, historical tool result, not re-run]'));
    expect(results.length).toBeGreaterThan(0);
    for (const r of results) expect(r).toMatch(/Sources: .+ \(sha256 [0-9a-f]{12}, as of \d{4}-\d{2}-\d{2}/);
    expect(system.some((s) => labelled(s) && s.includes('Open questions') && s.includes('holdings of VGT'))).toBe(true);
    // the parent's calls are text: never sent as calls or results
    const parentCallIds = new Set(ofType(parentEvents, 'tool.call.proposed').map((e) => e.event.data.toolCallId));
    expect(first!.messages.some((m) => m.role === 'tool' || (m.role === 'assistant' && (m.tool_calls?.length ?? 0) > 0))).toBe(false);

    // no tool executed again: the new Run proposed and dispatched nothing, the parent's receipts are unchanged
    expect(ofType(events, 'tool.call.dispatched')).toHaveLength(0);
    expect(ofType(events, 'tool.call.receipt').some((r) => parentCallIds.has(r.event.data.toolCallId))).toBe(false);
    const after = await t.log.readRun(parentRunId);
    expect(after.map((e) => e.event.eventId)).toEqual(parentEvents.map((e) => e.event.eventId));
    expect(ofType(after, 'tool.call.receipt')).toHaveLength(3);
    expect(events.every((e) => e.event.runId === runId)).toBe(true);
  }, 90_000);

  it('the CLI continue: admitted and linked; its request also carries the parent; the parent still gains nothing', async () => {
    const key = 'flow-continue-cli';
    await t.setScenario({ steps: [{ reply: { content: 'Continued from the CLI.' } }], then: 'error' }, key);
    const text = `[${key}] Go on with QQQ`;
    const res = await cli(['continue', parentRunId, text, '--message-id', key, '--no-follow']);
    expect(res.status).toBe(0);
    expect(res.out).toMatch(new RegExp(`admitted, continuing run ${parentRunId} \\(conversation ${conv}`));
    const runId = printedRunId(res.out);
    const events = await t.waitForSettlement(runId, 60_000);
    expect(ofType(events, 'run.admitted')[0]!.event.data.link).toEqual({ parentRunId, relation: 'continuation' });
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    const [first] = await requestsWith(key);
    expect(userOf(first!)).toEqual([text]);
    expect(systemOf(first!).some((s) => s.includes(`This Run continues Run ${parentRunId}`) && s.includes(parentRequest))).toBe(true);
    expect(ofType(events, 'tool.call.dispatched')).toHaveLength(0);
    expect((await t.log.readRun(parentRunId)).map((e) => e.event.eventId)).toEqual(parentEvents.map((e) => e.event.eventId));
  }, 90_000);

  it('a plain follow-up carries the earlier question and committed answer passages as labelled history; its grant and limits are fresh', async () => {
    const key = 'flow-followup';
    await t.setScenario({ steps: [{ reply: { content: 'For the previous year, the overlap was similar.' } }], then: 'error' }, key);
    const text = `[${key}] What about the previous year?`;
    const res = await post(conv, { clientMessageId: key, content: text });
    expect(res.status).toBe(201);
    expect(res.body.link).toBeNull();
    const runId = res.body.runId as string;
    const events = await t.waitForSettlement(runId, 60_000);
    const admitted = ofType(events, 'run.admitted')[0]!.event.data;
    expect(admitted.link).toBeUndefined();
    expect(admitted.conversationHistory?.runIds).toContain(parentRunId);

    const [first] = await requestsWith(key);
    expect(first!.messages.at(-1)).toMatchObject({ role: 'user', content: text });
    expect(userOf(first!)).toEqual([text]);
    const history = systemOf(first!).filter((s) => s.startsWith('[history]'));
    expect(history.some((s) => s.includes(parentRequest))).toBe(true);
    expect(history.some((s) => s.includes(finalText))).toBe(true);

    // fresh: the same grant and limits as the parent's admission (the configuration), a later deadline, its own usage only
    const parentAdmitted = ofType(parentEvents, 'run.admitted')[0]!.event.data;
    expect(admitted.grant).toEqual(parentAdmitted.grant);
    const { deadlineAt, ...limits } = admitted.limits;
    const { deadlineAt: parentDeadline, ...parentLimits } = parentAdmitted.limits;
    expect(limits).toEqual(parentLimits);
    expect(Date.parse(deadlineAt)).toBeGreaterThan(Date.parse(parentDeadline));
    expect(ofType(events, 'run.settled')[0]!.event.data.usage).toMatchObject({ modelRequests: 1, toolCalls: 0 });
    expect((await t.log.readRun(parentRunId)).map((e) => e.event.eventId)).toEqual(parentEvents.map((e) => e.event.eventId));
  }, 90_000);
});

describe("a continuation whose model asks for the parent's reads again (K3: completed tools are never re-run)", () => {
  it("the research policy proposes the parent's calls again: each is answered with the parent's result (reusedFrom), none is dispatched", async () => {
    const conv = 'flow-reuse';
    // no scenario: the scripted research policy reads the holdings files itself, and does it again for the continuation
    const parent = await post(conv, { clientMessageId: 'reuse-parent', content: 'Compare the holdings of SPY and QQQ' });
    expect(parent.status).toBe(201);
    const parentRunId = parent.body.runId as string;
    const parentEvents = await t.waitForSettlement(parentRunId);
    const parentReceipts = ofType(parentEvents, 'tool.call.receipt').filter((r) => r.event.data.status === 'succeeded');
    expect(parentReceipts.length).toBeGreaterThan(0);

    const cont = await post(conv, {
      clientMessageId: 'reuse-cont',
      content: 'Continue the comparison of SPY and QQQ: which of the top holdings differ?',
      continuationOfRunId: parentRunId,
    });
    expect(cont.status).toBe(201);
    const events = await t.waitForSettlement(cont.body.runId as string);
    const carried = ofType(events, 'context.carried')[0]!.event.data;
    const parentKeys = new Map((carried.completedCalls ?? []).map((c) => [c.effectKey, c]));
    expect(parentKeys.size).toBe(parentReceipts.length);
    const proposed = ofType(events, 'tool.call.proposed');
    const dispatched = new Set(ofType(events, 'tool.call.dispatched').map((d) => d.event.data.toolCallId));
    const receipts = new Map(ofType(events, 'tool.call.receipt').map((r) => [r.event.data.toolCallId, r.event.data]));
    const { effectKey } = await import('@runplane/contracts');
    const repeats = proposed.filter((p) => parentKeys.has(effectKey(p.event.data.name, p.event.data.argumentsText)));
    // the research policy asks for the same reads again (what the fresh-user review saw run twice)
    expect(repeats.length).toBeGreaterThan(0);
    for (const p of repeats) {
      const id = p.event.data.toolCallId;
      expect(dispatched.has(id)).toBe(false);
      const from = parentKeys.get(effectKey(p.event.data.name, p.event.data.argumentsText))!;
      expect(receipts.get(id)).toMatchObject({ status: 'succeeded', reusedFrom: { runId: parentRunId, toolCallId: from.toolCallId } });
    }
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).not.toBe('failed');
    // the parent's stream gained nothing
    expect((await t.log.readRun(parentRunId)).map((e) => e.event.eventId)).toEqual(parentEvents.map((e) => e.event.eventId));
  }, 120_000);
});

describe('a Ctrl-C of the CLI following a Run it did not start the stack for (K4)', () => {
  it('stops only the following: exit 130 with a line naming the Run and how to follow it again, and the Run settles on its own', async () => {
    const key = 'flow-sigint-ask';
    await t.setScenario({ steps: [{ reply: { content: `Answered ${key} after a while.` }, delayMs: 3_000 }], then: 'error' }, key);
    const env = { ...t.env, RUNPLANE_ADMISSION_URL: t.stack.endpoints.admission, RUNPLANE_PUBLICATION_URL: t.stack.endpoints.publication };
    const child = spawn(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'ask', `[${key}] What does SPY hold?`], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const admitted = new Promise<string>((resolve) => {
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        out += d;
        const runId = printedRunId(out);
        if (runId) resolve(runId);
      });
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const runId = await admitted;
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(out).toContain(
      `SIGINT: stopped following. Run ${runId} goes on (leaving is not a cancel); follow it again with: npm run runplane -- watch`,
    );
    expect(out).toContain(runId);
    // leaving was no cancel: the Run settles as the model answers
    const events = await t.waitForSettlement(runId);
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    expect(ofType(events, 'run.cancel.requested')).toEqual([]);
  }, 60_000);
});
