import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventCatalog, EventTypes, RunEvent, makeEvent, renderEventCatalog } from '@runplane/contracts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

describe('event catalogue', () => {
  it('docs/event-catalog.md is the catalogue generated from the zod schemas (regenerate: npm run runplane --silent -- docs event-catalog > docs/event-catalog.md)', () => {
    expect(readFileSync(join(root, 'docs', 'event-catalog.md'), 'utf8')).toBe(renderEventCatalog());
  });

  it('gives every type exactly one owner and a version', () => {
    for (const t of EventTypes) {
      expect(['admission', 'runtime', 'tools', 'publication', 'recovery', 'lifecycle']).toContain(EventCatalog[t].owner);
      expect(EventCatalog[t].version).toBeGreaterThan(0);
    }
    // the lifecycle owns the settlement, and records a child's settlement on its parent (K9, K10); nothing else
    expect(EventTypes.filter((t) => EventCatalog[t].owner === 'lifecycle')).toEqual(['run.settled', 'child.run.settled']);
  });

  it("rejects an event whose owner is not its type's owner, and bad data, with a reason", () => {
    const ok = makeEvent(
      'run.execution.finished',
      { runId: 'r', conversationId: 'c', correlationId: 'm', causationId: null },
      'k',
      { reason: 'answered', detail: '', answerTurn: 1 },
      new Date(0),
    );
    expect(RunEvent.safeParse(ok).success).toBe(true);
    expect(RunEvent.safeParse({ ...ok, owner: 'lifecycle' }).success).toBe(false);
    expect(RunEvent.safeParse({ ...ok, data: { reason: 'because' } }).success).toBe(false);
    expect(() =>
      makeEvent(
        'run.settled',
        { runId: 'r', conversationId: 'c', correlationId: 'm', causationId: null },
        'k',
        { outcome: 'done' } as never,
        new Date(0),
      ),
    ).toThrow();
  });

  it('derives the same event id for the same decision, another for another', () => {
    const ctx = { runId: 'r', conversationId: 'c', correlationId: 'm', causationId: null };
    const a = makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'x' }, new Date(5));
    const b = makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'x' }, new Date(0));
    const c = makeEvent('model.turn.requested', ctx, 2, { turn: 2, model: 'x' }, new Date(0));
    expect(a.eventId).toBe(b.eventId);
    expect(a.eventId).not.toBe(c.eventId);
  });
});
