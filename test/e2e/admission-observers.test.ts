/**
 * K1 (admission idempotent by message id), K4 (disconnect is not cancel; replay from
 * Last-Event-ID without calling the model) and K9 (an empty reply is not an answer), end to end
 * against the real processes, JetStream and PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { RunplaneHttpError, type ObservedEvent } from '@runplane/client';
import { repoRoot } from '@runplane/devstack';
import { runSubject } from '@runplane/eventlog';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('k1k4', {}, { audit: 'report' }); // forges admissions on the bus
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const post = async (conversationId: string, body: unknown) => {
  const res = await fetch(`${t.stack.endpoints.admission}/v1/conversations/${conversationId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

/** Binds the scenario of the Run asking `key`: it asks a human "Which fund?" (and parks), then answers in two passages. */
async function scriptAskWhichFund(key: string): Promise<void> {
  await t.setScenario(
    {
      steps: [
        { reply: { content: '', toolCalls: [{ id: `call_ask_${key}`, name: 'ask_human', arguments: { question: 'Which fund?' } }] } },
        { reply: { content: 'SPY it is.\n\nDone.' } },
      ],
      then: 'error',
    },
    key,
  );
}

describe('K1 first cut: admission is idempotent by clientMessageId', () => {
  it('same id and text returns the same Run with no new event; other text is a 409 that changes nothing', async () => {
    const first = await t.client.postMessage('conv-k1', { clientMessageId: 'k1-a', content: 'What does SPY hold?' });
    expect(first.status).toBe(201);
    expect(first.body.admission).toBe('admitted');
    const before = await t.waitForSettlement(first.body.runId);

    const again = await t.client.postMessage('conv-k1', { clientMessageId: 'k1-a', content: 'What does SPY hold?' });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({
      runId: first.body.runId,
      messageId: first.body.messageId,
      admission: 'existing',
      admittedAt: first.body.admittedAt,
    });

    const conflict = await post('conv-k1', { clientMessageId: 'k1-a', content: 'Something else entirely' });
    expect(conflict.status).toBe(409);
    expect(conflict.body).toMatchObject({ status: 409, code: 'message_conflict', type: 'urn:runplane:problem:message_conflict' });
    expect(String(conflict.body.detail)).toContain('k1-a');

    const after = await t.log.readRun(first.body.runId);
    expect(after.map((e) => e.seq)).toEqual(before.map((e) => e.seq));
  }, 90_000);

  it('concurrent duplicates produce exactly one Run', async () => {
    const results = await Promise.all(
      Array.from({ length: 8 }, () => t.client.postMessage('conv-k1', { clientMessageId: 'k1-concurrent', content: 'Compare SPY and IVV' })),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(results.filter((r) => r.status === 200)).toHaveLength(7);
    expect(new Set(results.map((r) => r.body.runId)).size).toBe(1);
    const events = await t.waitForSettlement(results[0]!.body.runId);
    expect(events.filter((e) => e.event.type === 'run.admitted')).toHaveLength(1);
    expect(events.filter((e) => e.event.type === 'run.settled')).toHaveLength(1);
  }, 90_000);

  it('the same clientMessageId in another conversation is another Message and Run', async () => {
    const a = await t.client.postMessage('conv-k1-x', { clientMessageId: 'shared-id', content: 'hello' });
    const b = await t.client.postMessage('conv-k1-y', { clientMessageId: 'shared-id', content: 'hello' });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(a.body.runId).not.toBe(b.body.runId);
    await t.waitForSettlement(a.body.runId);
    await t.waitForSettlement(b.body.runId);
  }, 90_000);

  it.each([
    ['missing content', { clientMessageId: 'x1' }, 'content'],
    ['blank content', { clientMessageId: 'x2', content: '   ' }, 'content'],
    ['missing clientMessageId', { content: 'hi' }, 'clientMessageId'],
    ['bad clientMessageId', { clientMessageId: 'has spaces', content: 'hi' }, 'clientMessageId'],
    ['unknown field', { clientMessageId: 'x3', content: 'hi', extra: 1 }, '(body)'],
    ['a NUL character', { clientMessageId: 'x4', content: 'Compare SPY \u0000 QQQ' }, 'content'],
  ])('a bad body (%s) gets 400 with the zod reason', async (_name, body, path) => {
    const res = await post('conv-k1-bad', body);
    expect(res.status).toBe(400);
    const problem = res.body as { code: string; issues: { path: string; message: string }[] };
    expect(problem.code).toBe('invalid_body');
    expect(problem.issues.map((i) => i.path)).toContain(path);
  });

  it('a body that is not JSON gets 415 and admits nothing', async () => {
    const res = await fetch(`${t.stack.endpoints.admission}/v1/conversations/conv-k1-form/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'clientMessageId=form-1&content=hello',
    });
    expect(res.status).toBe(415);
    expect(((await res.json()) as { code: string }).code).toBe('unsupported_media_type');
    const { admissionIds } = await import('@runplane/app-admission');
    expect(await t.log.readRun(admissionIds('conv-k1-form', 'form-1').runId)).toEqual([]);
  });

  it('malformed JSON and a bad conversation id get 400; an unknown Run gets 404', async () => {
    const malformed = await post('conv-k1-bad', '{"clientMessageId": ');
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ status: 400, code: 'bad_request' });
    expect((await post('bad%20id', { clientMessageId: 'x', content: 'hi' })).status).toBe(400);
    expect(await t.client.getRun('no-such-run')).toBeNull();
    await expect(t.client.getAnswer('no-such-run')).rejects.toBeInstanceOf(RunplaneHttpError);
  });
});

describe('K4 first cut: a disconnect only detaches the observer', () => {
  it('the Run settles after the observer drops; Last-Event-ID replays exactly the rest; no extra model request', async () => {
    await t.setScenario({
      steps: [
        { reply: { toolCalls: [{ name: 'list_funds', arguments: {} }] } },
        { reply: { content: 'First passage.\n\nSecond passage.\n\nThird passage.' }, delayMs: 2000, chunkDelayMs: 20 },
      ],
      then: 'error',
    });
    const { body } = await t.client.postMessage('conv-k4', { clientMessageId: 'k4-observer', content: 'List the funds you cover.' });
    const seen: ObservedEvent[] = [];
    const controller = new AbortController();
    const first = await t.client.streamEvents(body.runId, {
      signal: controller.signal,
      onEvent: (e) => {
        seen.push(e);
        if (seen.length === 3) controller.abort();
      },
    });
    expect(first.ended).toBe('aborted');
    expect(seen).toHaveLength(3);
    const atDisconnect = await t.log.readRun(body.runId);
    expect(atDisconnect.some((e) => e.event.type === 'run.settled')).toBe(false);

    const all = await t.waitForSettlement(body.runId);
    const settled = all.find((e) => e.event.type === 'run.settled')!.event;
    expect(settled.type === 'run.settled' && settled.data.outcome).toBe('completed');
    const requestsAfterRun = await t.modelRequests();
    expect(requestsAfterRun).toBe(all.filter((e) => e.event.type === 'model.turn.requested').length);

    const resumed: ObservedEvent[] = [];
    const second = await t.client.streamEvents(body.runId, { lastEventId: first.lastEventId, onEvent: (e) => resumed.push(e) });
    expect(second.ended).toBe('server');
    const expected = all.filter((e) => e.seq > first.lastEventId).map((e) => e.seq);
    expect(resumed.map((e) => e.seq)).toEqual(expected);
    expect([...seen, ...resumed].map((e) => e.seq)).toEqual(all.map((e) => e.seq));
    expect(await t.modelRequests()).toBe(requestsAfterRun);

    // resuming at the settlement (or a later event of the Run): nothing more will come, so 204 ends it at once
    const res = await fetch(`${t.stack.endpoints.publication}/v1/runs/${body.runId}/events`, {
      headers: { 'last-event-id': String(all[all.length - 1]!.seq) },
    });
    expect(res.status).toBe(204);
  }, 90_000);

  it('a cursor that is not a position of this Run (beyond the end, another Run) is refused with 400 naming it, while the Run is parked and after it settled; a valid cursor replays exactly the rest and the stream ends at the settlement; the CLI says so and exits 1', async () => {
    const key = `k4-cursor-${t.tag}`;
    await scriptAskWhichFund(key);
    const other = await t.client.postMessage('conv-k4-cursor', { clientMessageId: `${key}-other`, content: 'hello' });
    const otherEvents = await t.waitForSettlement(other.body.runId);
    const { body } = await t.client.postMessage('conv-k4-cursor', { clientMessageId: key, content: `[${key}] Which fund do you mean?` });
    const runId = body.runId;
    const opened = await eventually(
      async () => (await t.log.readRun(runId)).find((e) => e.event.type === 'wait.opened') ?? null,
      60_000,
      'the Run parked on its question',
    );
    const events = async (cursor: string | number, via: 'header' | 'query' = 'header') =>
      fetch(
        `${t.stack.endpoints.publication}/v1/runs/${runId}/events${via === 'query' ? `?lastEventId=${cursor}` : ''}`,
        via === 'header' ? { headers: { 'last-event-id': String(cursor) } } : {},
      );
    const refused = async (res: Response, reason: string | string[]) => {
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const problem = (await res.json()) as { code: string; cursor: number; reason: string; detail: string };
      expect(problem.code).toBe('invalid_cursor');
      expect([reason].flat()).toContain(problem.reason);
      expect(problem.detail).toContain(String(problem.cursor));
      return problem;
    };
    // the Run streams (parked, unsettled): a cursor past the end of the log, one above and far above
    const end = await t.log.lastSeq();
    for (const cursor of [end + 1, end + 1000, 999_999_999_999_999]) {
      // one above may have become another Run's event meanwhile: refused either way
      const problem = await refused(await events(cursor), cursor === end + 1 ? ['beyond-end', 'other-run'] : 'beyond-end');
      expect(problem.cursor).toBe(cursor);
    }
    await refused(await events(end + 1000, 'query'), 'beyond-end');
    // a position of another Run's event
    await refused(await events(otherEvents[otherEvents.length - 1]!.seq), 'other-run');
    await refused(await events(otherEvents[0]!.seq, 'query'), 'other-run');
    // a position on this Run's own subject that holds no fact (garbage published around the log) is a
    // position all the same: the stream replays what follows it (nothing after it yet: it waits)
    const garbage = await t.log.js.publish(runSubject(t.log.space, runId, 'runtime'), 'garbage {not json');
    const atGarbage = new AbortController();
    expect(
      (
        await fetch(`${t.stack.endpoints.publication}/v1/runs/${runId}/events`, {
          headers: { 'last-event-id': String(garbage.seq) },
          signal: atGarbage.signal,
        })
      ).status,
    ).toBe(200);
    atGarbage.abort();
    // malformed and negative stay 400 bad_request
    for (const bad of ['-1', '1.5', 'abc']) expect((await events(bad)).status).toBe(400);

    // the CLI: a clear message and a non-zero exit, without retrying
    const cliEnv = { ...t.env, RUNPLANE_ADMISSION_URL: t.stack.endpoints.admission, RUNPLANE_PUBLICATION_URL: t.stack.endpoints.publication };
    const watch = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'watch', runId, '--last-event-id', String(end + 1000)], {
      env: cliEnv,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(watch.status).toBe(1);
    expect(watch.stderr).toContain(`--last-event-id ${end + 1000}`);
    expect(watch.stderr).toContain('beyond the end of the log');
    const tooLong = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'watch', runId, '--last-event-id', '1'.repeat(16)], {
      env: cliEnv,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(tooLong.status).toBe(1);
    expect(tooLong.stderr).toContain('at most 15 digits');

    // a valid cursor: this Run's wait.opened; replays exactly what follows, then ends after the settlement
    const seen: ObservedEvent[] = [];
    const following = t.client.streamEvents(runId, { lastEventId: opened.seq, onEvent: (e) => seen.push(e) });
    await t.client.answerWait(runId, (opened.event as { data: { waitId: string } }).data.waitId, 'SPY');
    const ended = await following;
    expect(ended.ended).toBe('server');
    const all = await t.waitForSettlement(runId);
    expect(seen.map((e) => e.seq)).toEqual(all.filter((e) => e.seq > opened.seq).map((e) => e.seq));
    expect(seen[seen.length - 1]!.event.type).toBe('run.settled');

    // settled: from its first event the stream replays everything after it and ends; past the end is still refused
    const replay: ObservedEvent[] = [];
    expect((await t.client.streamEvents(runId, { lastEventId: all[0]!.seq, onEvent: (e) => replay.push(e) })).ended).toBe('server');
    expect(replay.map((e) => e.seq)).toEqual(all.slice(1).map((e) => e.seq));
    const after = await t.log.lastSeq();
    await refused(await events(after + 1000), 'beyond-end');
  }, 150_000);

  it('rejects a Last-Event-ID that is not a sequence number with 400', async () => {
    const { body } = await t.client.postMessage('conv-k4', { clientMessageId: 'k4-bad-id', content: 'hello' });
    const res = await fetch(`${t.stack.endpoints.publication}/v1/runs/${body.runId}/events`, { headers: { 'last-event-id': 'abc' } });
    expect(res.status).toBe(400);
    await t.waitForSettlement(body.runId);
  }, 60_000);
});

describe('observers at scale and over time (K4; docs/operations.md: keep-alive every 15 s, one short-lived consumer per observer)', () => {
  const consumers = async () => (await t.log.jsm.streams.info(t.log.space.stream)).state.consumer_count;

  it('50 observers of one Run each get every event once and end at the settlement; a silent stream gets its keep-alive within 15 s; no consumer is left behind', async () => {
    const baseline = await eventually(async () => {
      const before = await consumers();
      return before === (await consumers()) ? before : null;
    }, 30_000);
    const key = `k4-many-${t.tag}`;
    await scriptAskWhichFund(key);
    const { body } = await t.client.postMessage('conv-k4-many', { clientMessageId: key, content: `[${key}] Which fund do you mean?` });
    const runId = body.runId;
    const opened = await eventually(
      async () => (await t.log.readRun(runId)).find((e) => e.event.type === 'wait.opened') ?? null,
      60_000,
      'the Run parked on its question',
    );

    // parked and silent: a raw observer after the last event hears only the keep-alive, within 15 s (+ slack for a loaded machine)
    const silent = new AbortController();
    const res = await fetch(`${t.stack.endpoints.publication}/v1/runs/${runId}/events`, {
      headers: { 'last-event-id': String((await t.log.readRun(runId)).at(-1)!.seq) },
      signal: silent.signal,
    });
    expect(res.status).toBe(200);
    const startedAt = Date.now();
    const decoder = new TextDecoder();
    let text = '';
    for await (const chunk of res.body!) {
      text += decoder.decode(chunk as Uint8Array, { stream: true });
      if (text.includes(': keepalive')) break;
    }
    const keepaliveAfterMs = Date.now() - startedAt;
    silent.abort();
    expect(text).toContain(': keepalive');
    expect(text).not.toContain('\nid: ');
    expect(keepaliveAfterMs).toBeLessThan(15_000 + 5_000);

    const N = 50;
    const seen: number[][] = Array.from({ length: N }, () => []);
    const following = Array.from({ length: N }, (_, i) => t.client.streamEvents(runId, { onEvent: (e) => seen[i]!.push(e.seq) }));
    // every observer has replayed up to the open wait before the Run moves on
    await eventually(async () => (seen.every((s) => s.includes(opened.seq)) ? true : null), 60_000, 'every observer replayed the wait');
    await t.client.answerWait(runId, (opened.event as { data: { waitId: string } }).data.waitId, 'SPY');
    const ended = await Promise.all(following);
    const all = (await t.waitForSettlement(runId)).map((e) => e.seq);
    for (let i = 0; i < N; i++) {
      expect(ended[i]!.ended).toBe('server');
      expect(seen[i]).toEqual(all);
    }
    // every observer's consumer went with it (the silent one too)
    await eventually(async () => ((await consumers()) <= baseline ? true : null), 30_000, `the consumer count back to ${baseline}`);
  }, 180_000);
});

describe('K9 first cut: an empty model reply is not an answer', () => {
  it('settles failed with the reason, by the lifecycle, and publishes no passage (an empty reply is retried, charged, and stays no answer)', async () => {
    await t.setScenario({ steps: [{ reply: { content: '' } }], then: 'repeat-last' });
    const { body } = await t.client.postMessage('conv-k9', { clientMessageId: 'k9-empty', content: 'Say nothing.' });
    const events = await t.waitForSettlement(body.runId);
    const settled = events.filter((e) => e.event.type === 'run.settled');
    expect(settled).toHaveLength(1);
    const s = settled[0]!.event;
    expect(s.owner).toBe('lifecycle');
    expect(s.type === 'run.settled' && s.data.outcome).toBe('failed');
    expect(s.type === 'run.settled' && s.data.reason).toMatch(/no answer was produced.*returned no text/);
    expect(events.some((e) => e.event.type === 'passage.committed')).toBe(false);
    expect(events.filter((e) => e.event.type === 'model.turn.requested').length).toBeGreaterThan(1);
  }, 60_000);
});
