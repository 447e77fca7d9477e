/**
 * The auditor's replay: checks the guarantees of Runs (CONTRACTS.md K1-K11) from their stored
 * events alone, never from projections or service state (K11: "an auditor can replay any Run and
 * check K1-K10 from its events"). Pure: given the events read from the log (and the messages the
 * log could not verify), it returns which checks ran for each Run, which held, and the events that
 * break one. Reading the log is the caller's (`runplane audit`).
 */
import { effectKey, sha256Hex, subjectTokenOf, type Owner, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { budgetOf, closedForSettlement, emptyFacts, epochSuperseded, evolveOwned, unestablishedFacts, type RunFacts } from '@runplane/run-facts';

/** One check of the audit: an id, the contract it comes from and what it asserts. */
export interface CheckDefinition {
  id: CheckId;
  contract: 'K1' | 'K3' | 'K4' | 'K5' | 'K6' | 'K7' | 'K8' | 'K9' | 'K10' | 'K11';
  title: string;
}

/** Every check the audit runs, in report order. */
export const CHECKS = [
  { id: 'admission-once', contract: 'K1', title: 'one admission per message id, with the content its digest names' },
  { id: 'settlement-once', contract: 'K9', title: 'at most one settlement, on the lifecycle subject, made after both executor subjects were closed' },
  { id: 'settlement-references', contract: 'K9', title: "the settlement's and the answer's passages and receipts exist in the Run's log" },
  { id: 'settlement-honest', contract: 'K9', title: '`completed` has a published answer; `partial` exactly when something is listed unanswered' },
  {
    id: 'results-established',
    contract: 'K9',
    title: 'an answer settled `completed` rests on no failed, denied or unknown tool result; `partial` names each one unanswered',
  },
  { id: 'writer-fenced', contract: 'K6', title: 'no executor append after a fence, after the settlement, or under a closed or stale lease epoch' },
  {
    id: 'dispatch-once',
    contract: 'K5',
    title: 'at most one dispatch and one receipt per tool call; no dispatch after a receipt or of a carried unknown effect',
  },
  {
    id: 'budget-inside-grant',
    contract: 'K7',
    title:
      "model requests, tool calls and output tokens inside the limits; each request's input token reservation inside what was left; no model request after the deadline",
  },
  { id: 'child-carved', contract: 'K7', title: "a child's grant and limits inside what its parent had left, and admitted as requested" },
  {
    id: 'links',
    contract: 'K3',
    title: 'continuations, clarification answers and children linked to a real, eligible parent, which is never reopened',
  },
  {
    id: 'cancel-explicit',
    contract: 'K4',
    title: 'only an explicit cancel cancels (a `canceled` fence or settlement follows a recorded cancel request), and a recorded cancel does cancel',
  },
  {
    id: 'failure-local',
    contract: 'K8',
    title: 'a failed or denied tool call stops only itself: the execution goes on to another model turn unless a limit, a fence or a park stops it',
  },
  { id: 'wake-once', contract: 'K10', title: 'each wait answered at most once, before it expired; each child result recorded once' },
  {
    id: 'subject-chains',
    contract: 'K11',
    title: "every subject's back-links unbroken: no stored event missing (erased) between two of a Run's events",
  },
  { id: 'stored-verified', contract: 'K11', title: 'every stored message on the Run is a verified event' },
] as const satisfies readonly { id: string; contract: string; title: string }[];
export type CheckId = (typeof CHECKS)[number]['id'];

/** A stored message on a Run's subjects that the log could not verify (not an event, or not appended by the log). */
export interface StoredAnomaly {
  seq: number;
  subject: string;
  /** The Run its subject names. */
  runId: string;
  /** The short reason (`path: message` for a schema failure). */
  message: string;
  /** The full detail when the message shortened it (the validator's issues as JSON): in `--json`, not in the text report. */
  detail?: string;
}

/** One broken check: which, where (stream sequence, null when no one event is to blame) and why. */
export interface Violation {
  check: CheckId;
  seq: number | null;
  message: string;
  /** The full detail behind a shortened message (an unverified message's schema issues as JSON). */
  detail?: string;
}

/** A check's result on one Run. `not-applicable`: the Run has nothing the check is about. */
export interface CheckResult {
  id: CheckId;
  contract: CheckDefinition['contract'];
  status: 'held' | 'broken' | 'not-applicable';
  violations: Violation[];
}

/** The audit of one Run. */
export interface RunAudit {
  runId: string;
  /** The settlement's outcome, or null while the Run is not settled (an open Run is no violation). */
  outcome: string | null;
  events: number;
  checks: CheckResult[];
  /** True when no check is broken. */
  clean: boolean;
}

/** The audit of a set of Runs: per Run, and a summary. */
export interface AuditReport {
  runs: RunAudit[];
  summary: {
    runs: number;
    clean: number;
    broken: number;
    open: number;
    events: number;
    anomalies: number;
    /** Per check: on how many Runs it ran (not `not-applicable`) and how many it found broken. */
    checks: Record<CheckId, { ran: number; broken: number }>;
    /** Messages erased from the stream (K11), when the reader looked; null when it did not. */
    erased: ErasedMessages | null;
  };
  /** True when no audited Run is broken and nothing was erased from the stream. */
  clean: boolean;
}

/** The Runs to audit: each Run's verified events in stream order, and the anomalies found on its subjects. */
export interface AuditInput {
  /** Events by Run, each list in stream order (as `EventLog.readRun` / `readAll` deliver them). */
  runs: ReadonlyMap<string, readonly StoredEvent[]>;
  anomalies?: readonly StoredAnomaly[];
  /**
   * Runs to report on (default: every Run of `runs`). The others are read only as the parents or
   * children that the link checks look up (`--run`).
   */
  audited?: readonly string[];
  /** What is missing from the stream itself (its deleted messages), when the reader looked ({@link ErasedMessages}). */
  erased?: ErasedMessages;
}

/**
 * Stored messages gone from the Run stream: the stream is created with deletes and purges denied
 * and no limit that removes a message (K11: nothing committed is erased), so any sequence between 1
 * and its last that the stream no longer holds was erased by other means (a copy or backup
 * edited, a server's store tampered with). Which Run a deleted message belonged to cannot be known
 * (its subject is gone with it); a deleted message that was a Run's last on its subject, or its
 * only one (a settlement, an admission, the whole Run), leaves no broken back-link behind, so this
 * is the only place such an erasure shows.
 */
export interface ErasedMessages {
  /** How many sequences between 1 and the stream's last are not stored. */
  count: number;
  /** The first of them, in order (at most {@link ERASED_LISTED}). */
  seqs: number[];
}

/** How many erased sequences a report lists (the count is always whole). */
export const ERASED_LISTED = 100;

const EXECUTOR_TOKENS = new Set<Owner>(['runtime', 'tools']);

/**
 * Audits Runs from their events alone (K11). Every check of {@link CHECKS} runs on every audited
 * Run; a check with nothing to look at is `not-applicable`. Cross-Run checks (K1's message id,
 * K3's links, K7's carve) look the other Run up in `input.runs`; a linked Run that is not there is
 * a broken link when it should exist.
 * @returns the report; it never throws on a malformed history (that is what it reports).
 */
export function auditRuns(input: AuditInput): AuditReport {
  const anomaliesByRun = new Map<string, StoredAnomaly[]>();
  for (const a of input.anomalies ?? []) {
    const list = anomaliesByRun.get(a.runId);
    if (list) list.push(a);
    else anomaliesByRun.set(a.runId, [a]);
  }
  const replays = new Map<string, Replay>();
  for (const [runId, events] of input.runs) replays.set(runId, replay(runId, events, anomaliesByRun.get(runId) ?? []));
  // K1 across Runs: a message id admitted in two Runs
  const byMessage = new Map<string, string[]>();
  for (const r of replays.values()) {
    const id = r.facts.admitted?.message.messageId;
    if (id) byMessage.set(id, [...(byMessage.get(id) ?? []), r.runId]);
  }
  const audited = input.audited ?? [...input.runs.keys()];
  const runs: RunAudit[] = [];
  for (const runId of audited) {
    const r = replays.get(runId) ?? replay(runId, [], anomaliesByRun.get(runId) ?? []);
    const messageId = r.facts.admitted?.message.messageId;
    const others = messageId ? (byMessage.get(messageId) ?? []).filter((x) => x !== runId) : [];
    for (const other of others)
      r.report('admission-once', r.facts.admitted ? r.admittedSeq : null, `message ${messageId} is admitted in run ${other} too`);
    checkLinks(r, replays);
    runs.push(r.result());
  }
  const checks = Object.fromEntries(CHECKS.map((c) => [c.id, { ran: 0, broken: 0 }])) as AuditReport['summary']['checks'];
  for (const run of runs)
    for (const c of run.checks) {
      if (c.status !== 'not-applicable') checks[c.id].ran += 1;
      if (c.status === 'broken') checks[c.id].broken += 1;
    }
  return {
    runs,
    summary: {
      runs: runs.length,
      clean: runs.filter((r) => r.clean).length,
      broken: runs.filter((r) => !r.clean).length,
      open: runs.filter((r) => r.outcome === null).length,
      events: runs.reduce((n, r) => n + r.events, 0),
      anomalies: runs.reduce((n, r) => n + (anomaliesByRun.get(r.runId)?.length ?? 0), 0),
      checks,
      erased: input.erased ?? null,
    },
    clean: runs.every((r) => r.clean) && (input.erased?.count ?? 0) === 0,
  };
}

/** One Run replayed: its final facts, what the replay saw along the way, and the violations found. */
interface Replay {
  runId: string;
  facts: RunFacts;
  admittedSeq: number;
  settledSeq: number | null;
  /** The Run's first settlement, the one that counts (a later one is a violation, not a new outcome). */
  settlement: Extract<RunEvent, { type: 'run.settled' }>['data'] | null;
  events: number;
  applicable: Set<CheckId>;
  violations: Violation[];
  report(check: CheckId, seq: number | null, message: string, detail?: string): void;
  result(): RunAudit;
}

/** Replays one Run's events in stream order, checking each against the facts before it. */
function replay(runId: string, events: readonly StoredEvent[], anomalies: readonly StoredAnomaly[]): Replay {
  const violations: Violation[] = [];
  const applicable = new Set<CheckId>(['subject-chains', 'stored-verified', 'writer-fenced']);
  const r: Replay = {
    runId,
    facts: emptyFacts(runId),
    admittedSeq: 0,
    settledSeq: null,
    settlement: null,
    events: 0,
    applicable,
    violations,
    report(check, seq, message, detail) {
      applicable.add(check);
      violations.push({ check, seq, message, ...(detail === undefined ? {} : { detail }) });
    },
    result() {
      const checks = CHECKS.map((c): CheckResult => {
        const mine = violations.filter((v) => v.check === c.id);
        return {
          id: c.id,
          contract: c.contract,
          status: mine.length ? 'broken' : applicable.has(c.id) ? 'held' : 'not-applicable',
          violations: mine,
        };
      });
      return { runId, outcome: r.settlement?.outcome ?? null, events: r.events, checks, clean: violations.length === 0 };
    },
  };
  for (const a of anomalies) r.report('stored-verified', a.seq, a.message, a.detail);

  // the chain of each subject: stream sequences of every stored message on it, verified or not
  const onSubject = new Map<string, number[]>();
  for (const { subject, seq } of [...events, ...anomalies]) {
    const seqs = onSubject.get(subject);
    if (seqs) seqs.push(seq);
    else onSubject.set(subject, [seq]);
  }
  /** The stream sequence of the message stored before `seq` on its subject (0: none). */
  const previousOnSubject = new Map<number, number>();
  for (const seqs of onSubject.values()) {
    seqs.sort((x, y) => x - y);
    seqs.forEach((seq, i) => previousOnSubject.set(seq, i === 0 ? 0 : seqs[i - 1]!));
  }

  const seen = new Set<string>();
  const dispatches = new Map<string, number>();
  const receipts = new Map<string, { seq: number; status: string }>();
  const wakes = new Map<string, number>();
  const childResults = new Map<string, number>();
  /** K8: failed or denied receipts the execution has not gone on from yet (no later turn, limit, fence or park). */
  let failuresPending: { seq: number; toolCallId: string; name: string; status: string }[] = [];
  let grantedEpoch = 0;
  for (const stored of events) {
    const e = stored.event;
    if (seen.has(e.eventId)) {
      // the event log stores an event once (its id is the message id, its back-link is checked):
      // a copy stored again (a replay by a NATS user, the signature and payload copied) is not a
      // second fact, and the readers report it as a duplicate-event; so does the audit
      r.report(
        'stored-verified',
        stored.seq,
        `a copy of event ${e.eventId} (${e.type}) stored again: the event log stores each event once (a replay)`,
      );
      continue;
    }
    seen.add(e.eventId);
    r.events += 1;
    const before = r.facts;
    const token = subjectTokenOf(e);

    // K11: the back-link names the message stored before this one on its subject
    if (e.prevSeq !== undefined) {
      const previous = previousOnSubject.get(stored.seq) ?? 0;
      if (e.prevSeq !== previous)
        r.report(
          'subject-chains',
          stored.seq,
          e.prevSeq > previous
            ? `${e.type} was appended after #${e.prevSeq} on ${stored.subject}, which is not in the log (erased?)`
            : `${e.type} was appended expecting #${e.prevSeq} on ${stored.subject}, but #${previous} stands between them`,
        );
    }

    // K6: executor appends
    if (EXECUTOR_TOKENS.has(token) && e.type !== 'run.fenced' && e.type !== 'tool.call.late_observed' && e.type !== 'lease.parked') {
      if (r.settledSeq !== null)
        r.report('writer-fenced', stored.seq, `${e.type} appended on the ${token} subject after the settlement (#${r.settledSeq})`);
      else if (before.closed[token as 'runtime' | 'tools'])
        r.report('writer-fenced', stored.seq, `${e.type} appended on the ${token} subject after recovery fenced it`);
      const epoch = e.writer?.epoch;
      if (token === 'runtime' && epoch !== undefined) {
        if (e.type === 'lease.granted') {
          if (e.data.epoch <= grantedEpoch)
            r.report('writer-fenced', stored.seq, `lease.granted at epoch ${e.data.epoch}, not above the epoch ${grantedEpoch} granted before`);
        } else if (epochSuperseded(before, epoch))
          r.report(
            'writer-fenced',
            stored.seq,
            `${e.type} written under epoch ${epoch}, which the log had closed (parked, handed over or superseded)`,
          );
        else if (epoch < grantedEpoch)
          r.report('writer-fenced', stored.seq, `${e.type} written under stale epoch ${epoch} (epoch ${grantedEpoch} granted)`);
      }
    }
    if (e.type === 'lease.granted') grantedEpoch = Math.max(grantedEpoch, e.data.epoch);

    switch (e.type) {
      case 'run.admitted': {
        applicable.add('admission-once');
        if (before.admitted) r.report('admission-once', stored.seq, `a second admission of the Run (the first is event ${before.admitted.eventId})`);
        else r.admittedSeq = stored.seq;
        if (sha256Hex(e.data.message.content) !== e.data.message.contentSha256)
          r.report('admission-once', stored.seq, `the admitted content does not match its contentSha256 (K1's comparison key)`);
        break;
      }
      case 'run.settled': {
        applicable.add('settlement-once').add('settlement-references').add('settlement-honest');
        if (answeredWithPassages(before)) applicable.add('results-established');
        if (r.settledSeq !== null) r.report('settlement-once', stored.seq, `a second settlement (${e.data.outcome}); the first is #${r.settledSeq}`);
        else {
          r.settledSeq = stored.seq;
          r.settlement = e.data;
          if (!closedForSettlement(before))
            r.report(
              'settlement-once',
              stored.seq,
              `settled while an executor subject was open (runtime ${before.closed.runtime ? 'closed' : 'open'}, tools ${before.closed.tools ? 'closed' : 'open'}, not closed by its own finish)`,
            );
          checkSettlement(r, stored.seq, before, e);
          checkCancel(r, stored.seq, before, e);
        }
        break;
      }
      case 'answer.published':
        applicable.add('settlement-references');
        if (r.settledSeq !== null)
          r.report(
            'settlement-references',
            stored.seq,
            `an answer published after the settlement (#${r.settledSeq}): the settled answer was changed`,
          );
        for (const id of e.data.passageIds)
          if (!before.passages.has(id)) r.report('settlement-references', stored.seq, `the answer lists passage ${id}, never committed before it`);
        break;
      case 'passage.committed': {
        const earlier = before.passages.get(e.data.passageId);
        if (r.settledSeq !== null)
          r.report(
            'settlement-references',
            stored.seq,
            `passage ${e.data.passageId} committed (version ${e.data.version}) after the settlement (#${r.settledSeq}): the settled answer was changed`,
          );
        if (sha256Hex(e.data.text) !== e.data.sha256)
          r.report(
            'settlement-references',
            stored.seq,
            `passage ${e.data.passageId} version ${e.data.version}: its sha256 is not the digest of its text`,
          );
        if (earlier && e.data.version <= earlier.version && earlier.sha256 !== e.data.sha256)
          r.report('settlement-references', stored.seq, `passage ${e.data.passageId} committed again at version ${e.data.version} with other text`);
        break;
      }
      case 'tool.call.dispatched': {
        applicable.add('dispatch-once');
        const call = before.toolCalls.get(e.data.toolCallId);
        const first = dispatches.get(e.data.toolCallId);
        if (first !== undefined) r.report('dispatch-once', stored.seq, `tool call ${e.data.toolCallId} dispatched again (first at #${first})`);
        else dispatches.set(e.data.toolCallId, stored.seq);
        if (!call) r.report('dispatch-once', stored.seq, `tool call ${e.data.toolCallId} dispatched but never proposed`);
        const receipt = receipts.get(e.data.toolCallId);
        if (receipt)
          r.report('dispatch-once', stored.seq, `tool call ${e.data.toolCallId} dispatched after its ${receipt.status} receipt (#${receipt.seq})`);
        if (call && before.carried) {
          const key = effectKey(call.name, call.argumentsText);
          const unknown = before.carried.unknownEffects.find((u) => u.effectKey === key);
          if (unknown)
            r.report(
              'dispatch-once',
              stored.seq,
              `tool call ${e.data.toolCallId} repeats the unknown effect of ${unknown.runId}/${unknown.toolCallId}, and was dispatched`,
            );
        }
        break;
      }
      case 'tool.call.receipt': {
        applicable.add('dispatch-once');
        if (e.data.status === 'failed' || e.data.status === 'denied') {
          applicable.add('failure-local');
          const call = before.toolCalls.get(e.data.toolCallId);
          failuresPending.push({ seq: stored.seq, toolCallId: e.data.toolCallId, name: call?.name ?? 'unknown tool', status: e.data.status });
        }
        const first = receipts.get(e.data.toolCallId);
        if (first)
          r.report(
            'dispatch-once',
            stored.seq,
            `a second receipt for tool call ${e.data.toolCallId} (${e.data.status}; first ${first.status} at #${first.seq})`,
          );
        else receipts.set(e.data.toolCallId, { seq: stored.seq, status: e.data.status });
        if (e.data.status === 'unknown' && !dispatches.has(e.data.toolCallId))
          r.report('dispatch-once', stored.seq, `an unknown receipt for tool call ${e.data.toolCallId}, which was never dispatched`);
        break;
      }
      case 'model.turn.requested': {
        failuresPending = [];
        applicable.add('budget-inside-grant');
        const deadline = before.admitted?.limits.deadlineAt;
        if (deadline && Date.parse(e.occurredAt) > Date.parse(deadline))
          r.report('budget-inside-grant', stored.seq, `model turn ${e.data.turn} requested at ${e.occurredAt}, after the deadline ${deadline}`);
        checkInputReservation(r, stored.seq, before, e);
        checkMoneyReservation(r, stored.seq, before, e);
        break;
      }
      case 'run.execution.finished':
        for (const f of failuresPending)
          if (!STOPS_AT_A_LIMIT.has(e.data.reason))
            r.report(
              'failure-local',
              stored.seq,
              `the execution stopped (${e.data.reason}) right after tool call ${f.toolCallId} (${f.name}) was ${f.status} at #${f.seq}, without another model turn and at no limit`,
            );
        failuresPending = [];
        break;
      case 'run.finalization.started':
      case 'lease.parked':
      case 'run.handed_over':
        failuresPending = [];
        break;
      case 'run.cancel.requested':
        applicable.add('cancel-explicit');
        break;
      case 'run.fenced':
        failuresPending = [];
        if (e.data.reason === 'canceled') {
          applicable.add('cancel-explicit');
          if (!before.cancelRequested)
            r.report(
              'cancel-explicit',
              stored.seq,
              `the ${e.data.fencedSubject} subject was fenced \`canceled\` with no cancel request recorded before it`,
            );
        }
        break;
      case 'child.run.requested':
        applicable.add('child-carved');
        checkCarve(r, stored.seq, before, e);
        break;
      case 'wait.answered': {
        applicable.add('wake-once');
        const wait = before.waits.get(e.data.waitId);
        const first = wakes.get(e.data.waitId);
        if (!wait) r.report('wake-once', stored.seq, `wait ${e.data.waitId} answered but never opened`);
        else if (first !== undefined) r.report('wake-once', stored.seq, `wait ${e.data.waitId} answered again (first at #${first})`);
        else if (Date.parse(e.occurredAt) > Date.parse(wait.expiresAt))
          r.report('wake-once', stored.seq, `wait ${e.data.waitId} answered at ${e.occurredAt}, after it expired at ${wait.expiresAt}`);
        if (first === undefined) wakes.set(e.data.waitId, stored.seq);
        break;
      }
      case 'child.run.settled': {
        applicable.add('wake-once');
        const first = childResults.get(e.data.childRunId);
        if (!before.children.has(e.data.childRunId)) r.report('wake-once', stored.seq, `a result for child ${e.data.childRunId}, never requested`);
        else if (first !== undefined) r.report('wake-once', stored.seq, `child ${e.data.childRunId}'s result recorded again (first at #${first})`);
        else childResults.set(e.data.childRunId, stored.seq);
        break;
      }
      default:
        break;
    }
    // the replay owns its facts and reads `before` no more: folded in place (linear in the Run's events)
    r.facts = evolveOwned(before, stored);
  }
  // K1: every Run begins with its admission; a Run whose events stand without one lost it (erased,
  // or written by no admission): its other events are not the answer to an admitted message
  if (r.events > 0 && !r.facts.admitted) {
    const first = events[0]!;
    r.report(
      'admission-once',
      first.seq,
      `the Run has ${r.events} event(s) and no run.admitted: its admission is not in the log (erased?), yet it ran from #${first.seq} (${first.event.type})`,
    );
  }
  checkBudget(r);
  return r;
}

/** Why an execution may stop after a failed or denied tool call without another model turn (K8): a limit of its own grant, not the failure. */
const STOPS_AT_A_LIMIT = new Set<string>(['model-request-limit', 'tool-call-limit', 'token-limit', 'deadline', 'grant-refused']);

/**
 * K4 at the settlement: `canceled` only after a recorded cancel request; and a cancel recorded
 * before the settlement cancels, unless the runtime had already stopped with an answer (then the
 * answer settles: nothing was left to stop, the lifecycle's rule).
 */
function checkCancel(r: Replay, seq: number, before: RunFacts, e: Extract<RunEvent, { type: 'run.settled' }>): void {
  if (e.data.outcome === 'canceled') {
    r.applicable.add('cancel-explicit');
    if (!before.cancelRequested) r.report('cancel-explicit', seq, 'settled `canceled` with no cancel request recorded before it');
  } else if (before.cancelRequested && before.finished?.reason !== 'answered') {
    r.report(
      'cancel-explicit',
      seq,
      `settled \`${e.data.outcome}\` although a cancel was requested at ${before.cancelRequested.at} and the runtime had not stopped with an answer`,
    );
  }
}

/** K9: what a settlement names exists in the log, and its outcome is the honest one for what it lists. */
function checkSettlement(r: Replay, seq: number, before: RunFacts, e: Extract<RunEvent, { type: 'run.settled' }>): void {
  for (const id of e.data.passageIds)
    if (!before.passages.has(id)) r.report('settlement-references', seq, `the settlement names passage ${id}, never committed before it`);
  for (const listed of e.data.receipts) {
    const call = before.toolCalls.get(listed.toolCallId);
    if (!call?.receipt) r.report('settlement-references', seq, `the settlement names a receipt for tool call ${listed.toolCallId}, which has none`);
    else if (call.receipt.status !== listed.status)
      r.report(
        'settlement-references',
        seq,
        `the settlement says tool call ${listed.toolCallId} ${listed.status}; its receipt says ${call.receipt.status}`,
      );
  }
  if (e.data.outcome === 'completed' && !before.answer) r.report('settlement-honest', seq, 'settled completed without a published answer');
  const unanswered = e.data.unanswered;
  if (unanswered !== undefined && (e.data.outcome === 'partial') !== unanswered.length > 0)
    r.report('settlement-honest', seq, `settled ${e.data.outcome} with ${unanswered.length} part(s) listed unanswered`);
  checkEstablished(r, seq, before, e);
}

/** True when the runtime stopped with an answer and publication committed it in passages: the settlement rests on that answer. */
function answeredWithPassages(facts: RunFacts): boolean {
  return facts.finished?.reason === 'answered' && (facts.answer?.passageIds.length ?? 0) > 0;
}

/**
 * K9: a settlement of a published answer (`completed` or `partial`) against what the log says the
 * Run could not establish, with the lifecycle's own rule (`unestablishedFacts` of libs/run-facts, not a
 * copy): `completed` with such a result is a settlement that over-claims; `partial` must name each
 * one in its `unanswered` list (by the call's id or one of its argument values, as the rule reads
 * the answer's own list). A clarification published as the answer, a failure after text and the
 * other outcomes do not rest on tool results: not checked.
 */
function checkEstablished(r: Replay, seq: number, before: RunFacts, e: Extract<RunEvent, { type: 'run.settled' }>): void {
  if (!answeredWithPassages(before) || (e.data.outcome !== 'completed' && e.data.outcome !== 'partial')) return;
  for (const missing of unestablishedFacts(before, e.data.unanswered ?? []))
    r.report(
      'results-established',
      seq,
      e.data.outcome === 'completed'
        ? `settled completed, but the log holds ${missing.part}, which the Run never had (${missing.reason})`
        : `settled partial without naming ${missing.part} as unanswered (${missing.reason})`,
    );
}

/**
 * K7: a model request's input token reservation (`inputTokensEstimate`) fits in what the Run's
 * input token limit had left before it (used, measured or estimated, plus carved for children),
 * the runtime's rule before every request. A request that records no estimate (none is made
 * without an input token limit; logs from before the field) is not checked. What the provider
 * then measures may exceed the estimate: that overshoot is not a violation.
 */
function checkInputReservation(r: Replay, seq: number, before: RunFacts, e: Extract<RunEvent, { type: 'model.turn.requested' }>): void {
  const estimate = e.data.inputTokensEstimate;
  const ledger = budgetOf(before).inputTokens;
  if (estimate === undefined || ledger.limit === null) return;
  if (ledger.used + ledger.carved + estimate > ledger.limit)
    r.report(
      'budget-inside-grant',
      seq,
      `model turn ${e.data.turn} requested with ~${estimate} input tokens estimated while ${ledger.used} were used${ledger.carved ? ` and ${ledger.carved} carved for children` : ''}, over the input token limit of ${ledger.limit}`,
    );
}

/**
 * K7, money: under a money limit (`maxCost`) every model request carries its price in the limit's
 * currency and a reservation (`price.reservedMicros`) that fits in what was left before it (cost
 * used, the upper bound of unknown usage included, plus what was carved for children), the
 * runtime's rule before every request. As for input tokens, what the provider then measures may
 * exceed the input estimate: that overshoot is not a violation.
 */
function checkMoneyReservation(r: Replay, seq: number, before: RunFacts, e: Extract<RunEvent, { type: 'model.turn.requested' }>): void {
  const limit = before.admitted?.limits.maxCost;
  if (!limit) return;
  const price = e.data.price;
  if (!price || price.currency !== limit.currency) {
    r.report(
      'budget-inside-grant',
      seq,
      `model turn ${e.data.turn} requested without a price in ${limit.currency} under a money limit: its cost could not be charged`,
    );
    return;
  }
  const cost = budgetOf(before).cost;
  if (cost.used + cost.carved + price.reservedMicros > limit.micros)
    r.report(
      'budget-inside-grant',
      seq,
      `model turn ${e.data.turn} requested reserving ${price.reservedMicros} micro-${limit.currency} while ${cost.used} were used${cost.carved ? ` and ${cost.carved} carved for children` : ''}, over the money limit of ${limit.micros}`,
    );
}

/** K7: a child's grant and limits carved from what the parent had left when it asked. */
function checkCarve(r: Replay, seq: number, before: RunFacts, e: Extract<RunEvent, { type: 'child.run.requested' }>): void {
  const parent = before.admitted;
  if (!parent) return;
  const ledger = budgetOf(before);
  const child = e.data.limits;
  const over = (what: string, asked: number | undefined, left: number | null) => {
    if (asked !== undefined && left !== null && asked > left)
      r.report('child-carved', seq, `child ${e.data.childRunId} was given ${asked} ${what}; the parent had ${left} left`);
  };
  over('model requests', child.maxModelRequests, ledger.modelRequests.left);
  over('tool calls', child.maxToolCalls, ledger.toolCalls.left);
  over('input tokens', child.maxInputTokens, ledger.inputTokens.left);
  over('output tokens', child.maxOutputTokens, ledger.outputTokens.left);
  over('micro-units of money', child.maxCost?.micros, ledger.cost.left);
  if (Date.parse(child.deadlineAt) > Date.parse(parent.limits.deadlineAt))
    r.report('child-carved', seq, `child ${e.data.childRunId}'s deadline ${child.deadlineAt} is after the parent's ${parent.limits.deadlineAt}`);
  const extra = e.data.grant.tools.filter((t) => !parent.grant.tools.includes(t));
  if (extra.length) r.report('child-carved', seq, `child ${e.data.childRunId} is granted tools its parent was not: ${extra.join(', ')}`);
}

/** K7: what the Run used, against its limits (children's carves included). */
function checkBudget(r: Replay): void {
  const limits = r.facts.admitted?.limits;
  if (!limits || r.facts.turns.length + r.facts.toolCalls.size === 0) return;
  r.applicable.add('budget-inside-grant');
  const ledger = budgetOf(r.facts);
  const line = (what: string, used: number, carved: number, limit: number | null) => {
    if (limit !== null && used + carved > limit)
      r.report('budget-inside-grant', null, `${what}: ${used} used${carved ? ` and ${carved} carved for children` : ''}, over the limit of ${limit}`);
  };
  line('model requests', ledger.modelRequests.used, ledger.modelRequests.carved, ledger.modelRequests.limit);
  line('tool calls dispatched', ledger.toolCalls.used, ledger.toolCalls.carved, ledger.toolCalls.limit);
  line('output tokens measured', ledger.outputTokens.measured, ledger.outputTokens.carved, ledger.outputTokens.limit);
}

/** K3, K7: a linked Run's parent exists, was eligible, and the link is the one the parent recorded. */
function checkLinks(r: Replay, replays: ReadonlyMap<string, Replay>): void {
  const admitted = r.facts.admitted;
  const link = admitted?.link;
  // a parent whose children this Run requested: the child's admission matches the request
  for (const child of r.facts.children.values()) {
    const c = replays.get(child.childRunId);
    if (!c?.facts.admitted) continue; // a child not (yet) admitted, or not read: nothing to compare
    r.applicable.add('child-carved');
    const got = c.facts.admitted;
    if (JSON.stringify(got.limits) !== JSON.stringify(child.limits) || JSON.stringify(got.grant) !== JSON.stringify(child.grant))
      r.report('child-carved', c.admittedSeq, `child ${child.childRunId} was admitted with another grant or other limits than its parent requested`);
  }
  if (!admitted || !link) return;
  r.applicable.add('links');
  const parent = replays.get(link.parentRunId);
  if (!parent?.facts.admitted) {
    r.report('links', r.admittedSeq, `linked (${link.relation}) to run ${link.parentRunId}, which is not in the log`);
    return;
  }
  const p = parent.facts;
  if (p.conversationId !== r.facts.conversationId)
    r.report('links', r.admittedSeq, `linked (${link.relation}) to run ${link.parentRunId} of another conversation (${p.conversationId})`);
  // conversation ids are per principal: the same id of another principal is another Conversation
  else if ((p.admitted?.principal ?? null) !== (admitted.principal ?? null))
    r.report('links', r.admittedSeq, `linked (${link.relation}) to run ${link.parentRunId} of another principal's conversation`);
  switch (link.relation) {
    case 'continuation': {
      const settledBefore = parent.settledSeq !== null && parent.settledSeq < r.admittedSeq;
      if (!settledBefore) r.report('links', r.admittedSeq, `continues run ${link.parentRunId}, which was not settled when this Run was admitted`);
      else if (!['completed', 'partial', 'interrupted'].includes(parent.settlement!.outcome))
        r.report('links', r.admittedSeq, `continues run ${link.parentRunId}, settled ${parent.settlement!.outcome}: not eligible`);
      if (admitted.parentRequestSha256 && p.admitted && admitted.parentRequestSha256 !== p.admitted.message.contentSha256)
        r.report('links', r.admittedSeq, `the parent request digest does not match run ${link.parentRunId}'s admitted request`);
      break;
    }
    case 'clarification': {
      const id = admitted.clarification?.clarificationId;
      if (!id || !p.clarifications.has(id))
        r.report('links', r.admittedSeq, `answers clarification ${id ?? '(none named)'}, which run ${link.parentRunId} never asked`);
      break;
    }
    case 'child': {
      if (!p.children.has(r.runId)) r.report('links', r.admittedSeq, `a child of run ${link.parentRunId}, which never requested it`);
      if (parent.settledSeq !== null && parent.settledSeq < r.admittedSeq)
        r.report('links', r.admittedSeq, `a child admitted after its parent ${link.parentRunId} settled`);
      break;
    }
  }
}
