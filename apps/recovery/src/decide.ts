/**
 * The recovery decider: `decide(facts, trigger, now) -> RunEvent[]`, pure.
 * Recovery records no lease grant: the runtime that takes a lease records `lease.granted` itself,
 * with its first event under it (recovery is off the happy path; older logs hold grants recovery recorded, still read).
 * Recovery is off a Run's happy path: it appends only when a holder is lost, the Run is canceled,
 * past its deadline, without progress, its wait expired, or it finished with a tool call in flight.
 * - `LeaseLost`: the holder is gone (its lease expired, or it released the lease while stopping
 *   with the Run unfinished): fence the execution with one `run.fenced` marker on each executor's
 *   own subject (`runtime`, `tools`), so that every later conditional append of the stale holder
 *   fails at the log whatever it believes (K6), naming what was in flight and so has no known
 *   outcome (a model turn without its outcome, a dispatched tool call without its receipt: K5).
 *   The lifecycle then settles the Run `interrupted` (K10). Nothing when the execution already
 *   stopped on its own, the Run is settled, or it is already fenced.
 * - `CancelRequested`: the user's cancel intent is recorded: fence with reason `canceled`.
 * - `DeadlinePassed`: recovery's deadline sweep found the Run past its `deadlineAt` (from its
 *   admission): fence with reason `deadline`, naming what is uncertain, so that a Run nobody
 *   executes (no runtime, or one waiting forever) does not stay running; the lifecycle settles it
 *   `failed`. Nothing before the deadline, nor when the Run finished, is settled or fenced.
 * - `NoProgress`: recovery's sweep found that nothing counted as progress (answer text, finished
 *   or still streaming inside an unfinished paragraph (`model.output.progress`), a turn
 *   with text, a valid tool call, a receipt, a wake: `countsAsProgress` in libs/run-facts) happened
 *   for the Run's `noProgressSeconds` (K7): fence with reason `no-progress`, whoever holds the lease
 *   (a runtime that only receives keep-alive chunks still renews it; renewals are not progress).
 *   The lifecycle settles it `failed` (no answer was produced), or `partial` when text was committed.
 *   Nothing while the limit is not passed, the Run has no such limit, or it is parked (K10: the
 *   wait's expiry covers a Run waiting on a human or a child).
 * - `ExecutionFinished`: the runtime stopped on its own (`run.execution.finished`). When the
 *   execution closed itself (`facts.closesItself`: the runtime subject ends in that finish and
 *   every proposed tool call had its receipt then), nothing: the lifecycle settles it as it is
 *   (recovery off the happy path: no fence on the happy path; no executor append decided before the settlement can
 *   land after it, K6, K9). Otherwise (a call proposed or dispatched without a receipt when the
 *   runtime stopped, e.g. at its deadline: its receipt may still come), close each executor
 *   subject that is not closed yet with a fence of reason `settling`, naming what is uncertain,
 *   as before, so that the lifecycle's settlement, which waits for it, cannot be followed by an
 *   executor's append decided before it (the log refuses it: K6, K9). Nothing when the Run is
 *   settled or not finished.
 * Fences go on the `tools` subject first, then on `runtime`: the lifecycle wakes on the latter.
 * - `WaitExpired`: the Run is parked on a question for a human whose `expiresAt` passed
 *   unanswered (K10): fence with reason `wait-expired`; the lifecycle settles it `failed`.
 *   Nothing while every wait is answered or not yet expired.
 * Whether an expired lease is lost at all (its holder late or gone) is {@link expiredLease}'s rule.
 * A parked Run has no execution to lose (K10): when a lease expires or is released by a stopping
 * runtime while the log shows the Run parked at its last model turn (`parkedAtLastTurn`: a wait
 * opened or a child requested by that turn, answered or not, no later turn requested), `LeaseLost`
 * does not fence: it decides `lease.parked` on the runtime subject, which closes the lost holder's
 * epoch (its appends decided before it are refused by the log, K6), and the lease watcher then
 * marks the lease parked, so the wake (recorded already or to come) takes it at the next epoch.
 * An accepted answer is never thrown away because its Run's runtime died before releasing the lease.
 * A handed-over Run has no execution to lose either: when the log shows `run.handed_over` at the
 * lost lease's epoch (a draining holder recorded the transfer at a safe point, then died or stopped
 * before releasing the lease `handover` itself), `LeaseLost` decides nothing, and the lease watcher
 * marks the lease handed over, so the handover (the wake) takes it at the next epoch. A lease
 * released `handover` is never fenced; a handover nobody takes is caught by `NoProgress` and
 * `DeadlinePassed` as any other Run.
 */
import { contextFrom, makeEvent, type EventData, type FenceReason, type RunEvent, type UncertainStep } from '@runplane/contracts';
import {
  lastTurn,
  noProgressClock,
  parkedAtLastTurn,
  parkedOn,
  toolCallsInOrder,
  unansweredWaits,
  unknownTrigger,
  type RunFacts,
} from '@runplane/run-facts';

/** The holder of a lease: the runtime process that wrote under it. */
export interface Holder {
  service: string;
  instance: string;
}

export type RecoveryTrigger =
  | { type: 'LeaseLost'; epoch: number; holder: Holder; reason: Exclude<FenceReason, 'canceled' | 'deadline' | 'no-progress'>; detail: string }
  /** The user's cancel intent was recorded (K4): the execution is fenced as for a lost lease, with reason `canceled`. */
  | { type: 'CancelRequested' }
  /** Recovery's deadline sweep: the Run's deadline may have passed (the decider compares its `deadlineAt` with `now`). */
  | { type: 'DeadlinePassed' }
  /** Recovery's no-progress sweep: the Run may have made no progress for its `noProgressSeconds` (the decider compares its last progress with `now`, K7). */
  | { type: 'NoProgress' }
  /** The runtime recorded `run.execution.finished`: close the executors' subjects before the settlement, unless the execution closed itself. */
  | { type: 'ExecutionFinished' }
  /** Recovery's lease sweep: a parked Run's wait may have expired (the decider compares each unanswered wait's `expiresAt` with `now`). */
  | { type: 'WaitExpired' };

/**
 * A held lease as the lease sweep sees it: its epoch and holder, its TTL (ms), and when it
 * expires (epoch ms: the server time of its last renewal plus the TTL, or later after recovery's
 * own reconnection to NATS).
 */
export interface ExpiringLease {
  epoch: number;
  holder: Holder;
  ttlMs: number;
  expiresAt: number;
  /**
   * When the lease itself expired (its last renewal's server time plus the TTL), when that is
   * earlier than `expiresAt` (recovery judges from its own start or reconnection plus a grace):
   * the fence's detail states both, so an auditor does not read the judging time as the expiry.
   */
  storedExpiresAt?: number;
}

/**
 * A lease holder's process heartbeat as the sweep sees it (epoch ms): until when it vouches for the
 * process (`freshUntil`), and, when known, when its last beat was written (`lastAt`) and how often
 * the process beats (`everyMs`), which only the wording of a `gone` verdict uses.
 */
export interface HolderHeartbeat {
  freshUntil: number;
  lastAt?: number;
  everyMs?: number;
}

/** The verdict of {@link expiredLease}. */
export type ExpiredLeaseVerdict = { kind: 'held' } | { kind: 'late'; fenceBy: number } | { kind: 'gone'; detail: string };

/**
 * What an expired lease means (K6, K10, "late or gone"):
 * - `held`: not expired yet;
 * - `late`: expired, but its holder's process heartbeat (beaten by a thread of its own, apart
 *   from request work) is still fresh: the process is alive and its renewals run late (a loaded
 *   machine, a long piece of work on its event loop). Not fenced until `fenceBy` at the latest:
 *   one more lease TTL after the expiry, however fresh the heartbeat (a process whose main loop is
 *   stuck does not keep its Runs for ever);
 * - `gone`: expired and the heartbeat is missing or stale (the process was killed, crashed or
 *   stopped), or the grace of one TTL has run out: fence (`detail` says which, and, after the
 *   grace, when the process last beat: a beat missed means stopped, killed or cut off; a recent
 *   one, stuck or stopped since, never more than the sweep saw).
 * A killed holder is therefore fenced no later than `TTL` after its last renewal or beat, as
 * before heartbeats existed: its heartbeat, written every third of the TTL, stops with it.
 * @param heartbeat until when the holder's heartbeat vouches for it (epoch ms), or null when it has none.
 * @param now epoch ms.
 */
export function expiredLease(lease: ExpiringLease, heartbeat: HolderHeartbeat | null, now: number): ExpiredLeaseVerdict {
  if (now <= lease.expiresAt) return { kind: 'held' };
  const fenceBy = lease.expiresAt + lease.ttlMs;
  const stored = lease.storedExpiresAt;
  const expired =
    stored !== undefined && stored < lease.expiresAt
      ? `lease epoch ${lease.epoch} of ${lease.holder.instance} expired at ${new Date(stored).toISOString()} without a renewal (judged from ${new Date(lease.expiresAt).toISOString()}: recovery's grace after its own start or reconnection)`
      : `lease epoch ${lease.epoch} of ${lease.holder.instance} expired at ${new Date(lease.expiresAt).toISOString()} without a renewal`;
  if (heartbeat && now <= heartbeat.freshUntil) {
    if (now <= fenceBy) return { kind: 'late', fenceBy };
    // the verdict is the same either way; the detail, which auditors read in `run.fenced`, says
    // what the sweep saw and concludes no more than that: a process that missed a beat (silent for
    // over one and a half intervals) stopped, was killed or was cut off; one whose last beat is
    // recent may be stuck, or may have died since that beat (a lease TTL short beside the member
    // TTL fences a killed holder before its next beat is due)
    const { lastAt, everyMs } = heartbeat;
    const more = `renewed nothing for one more TTL (${lease.ttlMs} ms)`;
    if (lastAt === undefined || everyMs === undefined)
      return {
        kind: 'gone',
        detail: `${expired}; its process heartbeat is still within its TTL but it ${more}: stuck, or stopped since its last beat`,
      };
    const silentMs = now - lastAt;
    const beat = `${new Date(lastAt).toISOString()} (${silentMs} ms before; it beats every ${everyMs} ms)`;
    if (silentMs > 1.5 * everyMs)
      return { kind: 'gone', detail: `${expired}; its process has not beaten since ${beat} and ${more}: stopped, killed or cut off` };
    return { kind: 'gone', detail: `${expired}; its process last beat at ${beat} but ${more}: stuck, or stopped since that beat` };
  }
  // the last beat first, when known: "stale since" alone (the beat's time plus its TTL) read as if
  // the process had lived until then (a trial's kill -9 at 18:06:25.9, "stale since 18:06:40.458")
  const stale = `stale since ${new Date(heartbeat?.freshUntil ?? 0).toISOString()}`;
  const why = !heartbeat
    ? 'its process has no heartbeat'
    : heartbeat.lastAt !== undefined
      ? `its process last beat at ${new Date(heartbeat.lastAt).toISOString()} (its heartbeat ${stale})`
      : `its process heartbeat is ${stale}`;
  return { kind: 'gone', detail: `${expired}; ${why}` };
}

/** Decides recovery's events for a trigger (see the module comment). */
export function decide(facts: RunFacts, trigger: RecoveryTrigger, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent || facts.settled) return [];
  switch (trigger.type) {
    case 'LeaseLost': {
      // handed over at that epoch by its holder (K10): nothing was executing, the handover is the wake
      if (lostAfterHandover(facts, trigger.epoch)) return [];
      // parked at its last turn: nothing was executing, nothing is lost; the wake continues it (K10)
      const on = facts.cancelRequested ? null : parkedAtLastTurn(facts);
      if (on) return parkLease(facts, trigger, on, now);
      return fence(facts, trigger.epoch, trigger.holder, trigger.reason, trigger.detail, now);
    }
    case 'WaitExpired': {
      if (facts.cancelRequested) return [];
      const expired = unansweredWaits(facts).filter((w) => Date.parse(w.expiresAt) <= now.getTime());
      if (expired.length === 0) return [];
      const lease = facts.leases[facts.leases.length - 1];
      const w = expired[0]!;
      return fence(
        facts,
        lease?.epoch ?? 0,
        lease?.holder ?? null,
        'wait-expired',
        `wait ${w.waitId} ("${w.question.slice(0, 120)}") expired unanswered at ${w.expiresAt}`,
        now,
      );
    }
    case 'CancelRequested': {
      if (!facts.cancelRequested) return [];
      const lease = facts.leases[facts.leases.length - 1];
      const who = facts.cancelRequested.requestedBy ?? 'the user';
      return fence(
        facts,
        lease?.epoch ?? 0,
        lease?.holder ?? null,
        'canceled',
        `canceled by ${who}${facts.cancelRequested.reason ? `: ${facts.cancelRequested.reason}` : ''}`,
        now,
      );
    }
    case 'DeadlinePassed': {
      const deadlineAt = facts.admitted.limits.deadlineAt;
      if (now.getTime() < Date.parse(deadlineAt)) return [];
      const lease = facts.leases[facts.leases.length - 1];
      const parked = parkedOn(facts);
      const who = parked
        ? `the Run was parked ${parked}`
        : lease
          ? `lease epoch ${lease.epoch} of ${lease.holder.instance} was held, the Run not stopped`
          : 'no runtime took the Run';
      return fence(facts, lease?.epoch ?? 0, lease?.holder ?? null, 'deadline', `deadline ${deadlineAt} passed (${who})`, now);
    }
    case 'NoProgress': {
      const clock = noProgressClock(facts, now);
      if (!clock?.passed) return [];
      const lease = facts.leases[facts.leases.length - 1];
      const seconds = Math.round(clock.limitMs! / 1000);
      return fence(
        facts,
        lease?.epoch ?? 0,
        lease?.holder ?? null,
        'no-progress',
        `no progress for ${Math.round(clock.sinceMs / 1000)} s (limit ${seconds} s): nothing counted as progress since ${clock.lastProgressAt}`,
        now,
      );
    }
    case 'ExecutionFinished':
      return closeForSettlement(facts, now);
    default:
      return unknownTrigger('recovery', trigger);
  }
}

/**
 * True when the holder of lease `epoch` handed the Run over at that epoch (`run.handed_over`) and
 * nothing ended the Run since (K10): its lost lease loses nothing and is not fenced.
 */
export function lostAfterHandover(facts: RunFacts, epoch: number): boolean {
  return !facts.cancelRequested && facts.handedOver?.epoch === epoch && !facts.finished && !facts.fenced && !facts.settled;
}

/**
 * `lease.parked` for the lost holder of a Run parked at its last turn (K6, K10), once per epoch:
 * it stands on the runtime subject, so the holder's appends decided before it fail at the log,
 * and a holder that reads it writes nothing more (`epochSuperseded`).
 */
function parkLease(
  facts: RunFacts,
  lost: Extract<RecoveryTrigger, { type: 'LeaseLost' }>,
  on: 'awaiting_human' | 'awaiting_child',
  now: Date,
): RunEvent[] {
  if (facts.parkedEpoch >= lost.epoch) return [];
  const woken = parkedOn(facts) === null;
  return [
    makeEvent(
      'lease.parked',
      contextFrom(facts.lastEvent!),
      `parked/${lost.epoch}`,
      {
        epoch: lost.epoch,
        holder: lost.holder,
        reason: lost.reason === 'runtime-stopped' ? 'runtime-stopped' : 'lease-expired',
        detail: lost.detail,
        on,
        woken,
      },
      now,
    ),
  ];
}

/**
 * One `run.fenced` marker on each executor's subject, unless the execution already stopped or the
 * Run is settled. A Run fenced already gets nothing, except where its fence is incomplete: an
 * executor appended on its subject between the two markers (the second append was refused), so
 * that subject is open; it is fenced again with the first marker's reason, else nothing would
 * ever close it and the Run would never settle (K9).
 */
function fence(facts: RunFacts, epoch: number, holder: Holder | null, reason: FenceReason, detail: string, now: Date): RunEvent[] {
  if (facts.settled) return [];
  if (facts.fenced) return completeFence(facts, facts.fenced, now);
  if (facts.finished) return [];
  const data = { epoch, holder, reason, detail, uncertain: uncertainSteps(facts) };
  const ctx = contextFrom(facts.lastEvent!);
  return EXECUTOR_SUBJECTS.map((fencedSubject) => makeEvent('run.fenced', ctx, `fence/${epoch}/${fencedSubject}`, { fencedSubject, ...data }, now));
}

/** The fence `first` again on each executor subject still open after it (see {@link fence}); its key names the subject's position, so it is a new fact. */
function completeFence(facts: RunFacts, first: EventData<'run.fenced'>, now: Date): RunEvent[] {
  if (facts.finished) return []; // closed for the settlement instead (closeForSettlement)
  const ctx = contextFrom(facts.lastEvent!);
  // open: its last event is an executor's append, not a fence (a subject with no event was never written after one)
  const open = EXECUTOR_SUBJECTS.filter((subject) => !facts.closed[subject] && facts.lastSeqByOwner[subject] > 0);
  return open.map((fencedSubject) =>
    makeEvent(
      'run.fenced',
      ctx,
      `fence/${first.epoch}/${fencedSubject}/after/${facts.lastSeqByOwner[fencedSubject]}`,
      { ...first, fencedSubject, uncertain: uncertainSteps(facts) },
      now,
    ),
  );
}

/** The executors' subjects, in the order their fences are written: the lifecycle wakes on the `runtime` one, the last. */
const EXECUTOR_SUBJECTS = ['tools', 'runtime'] as const;

/**
 * A `settling` fence on each executor subject not closed yet, for a finished, unsettled Run whose
 * execution did not close itself ({@link RunFacts.closesItself}); nothing for one that did.
 */
function closeForSettlement(facts: RunFacts, now: Date): RunEvent[] {
  const finished = facts.finished;
  if (!finished || facts.closesItself) return [];
  const lease = facts.leases[facts.leases.length - 1];
  const data = {
    epoch: lease?.epoch ?? 0,
    holder: lease?.holder ?? null,
    reason: 'settling' as const,
    detail: `execution finished (${finished.reason}): the executors' subjects are closed before the settlement`,
    uncertain: uncertainSteps(facts),
  };
  const ctx = contextFrom(facts.lastEvent!);
  return EXECUTOR_SUBJECTS.filter((subject) => !facts.closed[subject]).map((fencedSubject) =>
    makeEvent('run.fenced', ctx, `settling/${fencedSubject}`, { fencedSubject, ...data }, now),
  );
}

/** What the execution had started without a recorded outcome. */
export function uncertainSteps(facts: RunFacts): UncertainStep[] {
  const out: UncertainStep[] = [];
  const last = lastTurn(facts);
  if (last && !last.completed && !last.failed) out.push({ kind: 'model-turn', turn: last.turn });
  for (const call of toolCallsInOrder(facts)) {
    if (call.dispatched && !call.receipt) out.push({ kind: 'tool-call', toolCallId: call.toolCallId, name: call.name });
  }
  return out;
}
