/**
 * The audit's text report (apps/cli audit.ts `renderAudit`, docs/operations.md "Auditing Runs"),
 * given/when/then over `auditRuns` (libs/audit) with no event log: what a Run line claims must be
 * what its events support.
 */
import { describe, expect, it } from '@jest/globals';
import { auditRuns } from '@runplane/audit';
import { renderAudit } from '../src/audit.js';

describe('renderAudit', () => {
  it('given a Run id on whose subjects only a message that is not a fact stands, then its line claims no check held over no events', () => {
    const report = auditRuns({
      runs: new Map(),
      audited: ['not-a-run'],
      anomalies: [{ seq: 7, subject: 'rp.run.not-a-run.admission.0', runId: 'not-a-run', message: 'not a valid event' }],
    });
    const lines = renderAudit(report);
    expect(lines[0]).toBe('BROKEN run not-a-run (no event of the log: only messages that are not facts stand on its subjects): 1 broken');
    expect(lines).toContain('audited 1 run(s), 0 event(s): 0 clean, 1 broken (1 of all not settled, clean or broken); 1 unverified message(s)');
  });
});
