import { describe, expect, it } from '@jest/globals';
import { admissionIds, decideAdmission, type AdmitCommand } from '@runplane/app-admission';

const cmd = (over: Partial<AdmitCommand> = {}): AdmitCommand => ({
  conversationId: 'conv-1',
  clientMessageId: 'client-1',
  content: 'Compare SPY and QQQ',
  grant: { tools: ['list_funds'], model: 'm' },
  limits: { maxModelRequests: 4, maxToolCalls: 4, deadlineSeconds: 60 },
  now: new Date('2026-01-01T00:00:00Z'),
  requestId: 'req-1',
  ...over,
});

describe('admission decide (K1)', () => {
  it('given no admission, when a message arrives, then one Run is admitted with ids derived from the client id', () => {
    const d = decideAdmission(null, cmd());
    expect(d.kind).toBe('admit');
    expect(d.event.runId).toBe(admissionIds('conv-1', 'client-1').runId);
    expect(d.event.data.limits.deadlineAt).toBe('2026-01-01T00:01:00.000Z');
  });

  it('given an admission, when the same id and text arrive again, then the existing Run is returned', () => {
    const first = decideAdmission(null, cmd());
    expect(decideAdmission(first.event, cmd({ now: new Date('2026-01-02T00:00:00Z'), requestId: 'req-2' }))).toEqual({ kind: 'existing', event: first.event });
  });

  it('given an admission, when the same id arrives with other text, then it is a conflict', () => {
    const first = decideAdmission(null, cmd());
    expect(decideAdmission(first.event, cmd({ content: 'other' })).kind).toBe('conflict');
  });

  it('the same client id in two conversations names two Runs; the same pair always the same Run', () => {
    expect(admissionIds('a', 'x').runId).not.toBe(admissionIds('b', 'x').runId);
    expect(admissionIds('a', 'x')).toEqual(admissionIds('a', 'x'));
  });
});
