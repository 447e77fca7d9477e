/**
 * `listRunViews` over real PostgreSQL: one principal's Runs or every Run, newest admission first
 * (ties by run id), a page at a time after a position (keyset), with `more` when Runs follow.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { makeEvent, sha256Hex } from '@runplane/contracts';
import { applyStoredEvent, listRunViews } from '@runplane/projections';
import { at, ctxOf, migratedTestDatabase, storedInOrder, uniqueTag } from './fixtures.js';

const db = migratedTestDatabase('list');

/** A `run.admitted` of `principal` (none: authentication disabled) at `base + seconds`. */
function admitted(runId: string, principal: string | null, seconds: number) {
  const content = `question of ${runId}`;
  return makeEvent(
    'run.admitted',
    ctxOf(runId),
    'admission',
    {
      message: { messageId: `msg-${runId}`, clientMessageId: `client-${runId}`, content, contentSha256: sha256Hex(content) },
      grant: { tools: ['list_funds'], model: 'runplane-scripted-research' },
      limits: { maxModelRequests: 8, maxToolCalls: 16, deadlineAt: at(900).toISOString() },
      ...(principal ? { principal } : {}),
    },
    at(seconds),
  );
}

const tag = uniqueTag();
const id = (name: string) => `${name}-${tag}`;

beforeAll(async () => {
  const events = [
    admitted(id('a0'), 'alice', 0),
    admitted(id('a1'), 'alice', 1),
    admitted(id('b1'), 'bob', 1), // the same instant as a1: ordered by id
    admitted(id('a2'), 'alice', 2),
    admitted(id('n3'), null, 3),
  ];
  for (const s of storedInOrder(events)) await applyStoredEvent(db.orm.em, s);
});

const ids = (page: { runs: { runId: string }[] }) => page.runs.map((r) => r.runId);

describe('listRunViews', () => {
  it("given alice's three Runs, then pages of two: newest first, then the rest after the last one, nothing of bob's", async () => {
    const first = await listRunViews(db.orm, { principal: 'alice', limit: 2, after: null });
    expect([ids(first), first.more]).toEqual([[id('a2'), id('a1')], true]);
    const last = first.runs[1]!;
    const second = await listRunViews(db.orm, { principal: 'alice', limit: 2, after: { admittedAt: last.admittedAt, runId: last.runId } });
    expect([ids(second), second.more]).toEqual([[id('a0')], false]);
    // the projection says whose Run it is; the API shows that to admins only (admission `viewFor`)
    expect(first.runs[0]).toHaveProperty('principal', 'alice');
    expect(first.runs[0]).toMatchObject({ question: `question of ${id('a2')}`, status: 'admitted' });
  });

  it('given no principal (an admin), then every Run, ties at one instant ordered by id descending, and a position between them is kept', async () => {
    const all = await listRunViews(db.orm, { principal: null, limit: 100, after: null });
    const tied = [id('a1'), id('b1')].sort().reverse();
    expect(ids(all)).toEqual([id('n3'), id('a2'), ...tied, id('a0')]);
    const afterFirstTied = await listRunViews(db.orm, { principal: null, limit: 100, after: { admittedAt: at(1).toISOString(), runId: tied[0]! } });
    expect(ids(afterFirstTied)).toEqual([tied[1], id('a0')]);
  });

  it('given a principal without Runs, then an empty page', async () => {
    expect(await listRunViews(db.orm, { principal: 'carol', limit: 10, after: null })).toEqual({ runs: [], more: false });
  });
});
