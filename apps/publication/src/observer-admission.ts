/**
 * Admission of observer streams (`GET /v1/runs/{runId}/events`): how many one publication process
 * holds open, in all and per principal, and whether one more may open. Each open stream holds an
 * ordered JetStream consumer, and the Run stream's consumers are limited (10,000 named by the
 * stream, eventlog `RUN_STREAM_MAX_CONSUMERS`; nats-server's default of 1,000 on a stream that names
 * none), shared with the services' durables: without caps one principal's streams took them all
 * and every other user's stream failed (contracts `ObserverConfig`).
 *
 * A decider in the shape of the owners' (`decide.ts`): {@link decideObserver} decides an
 * {@link OpenObserver} command from the {@link ObserverCounts} that {@link evolveObservers} folds
 * from what opened and closed; nothing here reads the clock or the world. {@link ObserverGate} is
 * the process's one mutable holder of the counts.
 */
import type { ObserverConfig } from '@runplane/contracts';

/** Seconds a refused observer is told to wait (`Retry-After`): a hint, since when an open stream ends is not known. */
export const OBSERVER_RETRY_AFTER_SECONDS = 5;

/** The caps, streams (contracts `ObserverConfig`). */
export interface ObserverCaps {
  /** `RUNPLANE_OBSERVER_STREAMS_MAX`: open streams of this process, all principals together. */
  perProcess: number;
  /** `RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL`: open streams of one principal on this process. */
  perPrincipal: number;
}

/** The caps of a parsed {@link ObserverConfig}. */
export const observerCapsOf = (cfg: ObserverConfig): ObserverCaps => ({
  perProcess: cfg.RUNPLANE_OBSERVER_STREAMS_MAX,
  perPrincipal: cfg.RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL,
});

/**
 * Whose stream it is: the token's `sub` (admins too), or null when callers are not told apart
 * (authentication disabled: everyone is one `anonymous` principal, and only the process cap applies).
 */
export type ObserverPrincipal = string | null;

/** What changed the counts: a stream was admitted (and counted) or ended (however: client gone, settlement, token expiry, shutdown, a failed start). */
export type ObserverEvent = { type: 'ObserverOpened'; principal: ObserverPrincipal } | { type: 'ObserverClosed'; principal: ObserverPrincipal };

/** The command: a principal asks for one more stream. */
export interface OpenObserver {
  type: 'OpenObserver';
  principal: ObserverPrincipal;
}

/** Open streams of this process: `open` in all, `byPrincipal` per principal (a principal with none is absent). */
export interface ObserverCounts {
  readonly open: number;
  readonly byPrincipal: ReadonlyMap<string, number>;
}

export const initialObserverCounts: ObserverCounts = { open: 0, byPrincipal: new Map() };

/** Why a stream was refused, as its problem says it (status, `code`, `detail`, `Retry-After` and the extension members). */
export interface ObserverRefusal {
  status: 429 | 503;
  code: 'observer_limit' | 'observer_capacity';
  setting: 'RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL' | 'RUNPLANE_OBSERVER_STREAMS_MAX';
  /** The cap, streams. */
  limit: number;
  /** Streams open under that cap when asked. */
  open: number;
  retryAfterSeconds: number;
  detail: string;
}

/** The decision: admitted (the caller then records `ObserverOpened`), or refused with its problem. */
export type ObserverDecision = { admitted: true } | { admitted: false; refusal: ObserverRefusal };

/**
 * The counts after `event`. A close of a stream that is not counted leaves them as they are (never
 * below zero); the caller makes each stream's close happen once ({@link ObserverGate}).
 */
export function evolveObservers(counts: ObserverCounts, event: ObserverEvent): ObserverCounts {
  const delta = event.type === 'ObserverOpened' ? 1 : -1;
  if (delta < 0 && counts.open === 0) return counts;
  if (event.principal === null) return { open: counts.open + delta, byPrincipal: counts.byPrincipal };
  const mine = (counts.byPrincipal.get(event.principal) ?? 0) + delta;
  if (mine < 0) return counts;
  const byPrincipal = new Map(counts.byPrincipal);
  if (mine === 0) byPrincipal.delete(event.principal);
  else byPrincipal.set(event.principal, mine);
  return { open: counts.open + delta, byPrincipal };
}

/**
 * Decides whether `command`'s principal may open one more stream: refused 429 `observer_limit`
 * when it already holds `caps.perPrincipal` (its own excess, checked first: a principal at its cap
 * is told so even when the process is full too), else 503 `observer_capacity` when the process
 * holds `caps.perProcess`, else admitted. Each refusal carries `Retry-After`
 * ({@link OBSERVER_RETRY_AFTER_SECONDS}) and names the setting.
 */
export function decideObserver(command: OpenObserver, counts: ObserverCounts, caps: ObserverCaps): ObserverDecision {
  switch (command.type) {
    case 'OpenObserver':
      return open(command, counts, caps);
    default: {
      const unknown: never = command.type;
      throw new Error(`unknown observer command ${String(unknown)}`);
    }
  }
}

function open(command: OpenObserver, counts: ObserverCounts, caps: ObserverCaps): ObserverDecision {
  const mine = command.principal === null ? 0 : (counts.byPrincipal.get(command.principal) ?? 0);
  if (command.principal !== null && mine >= caps.perPrincipal) {
    return {
      admitted: false,
      refusal: {
        status: 429,
        code: 'observer_limit',
        setting: 'RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL',
        limit: caps.perPrincipal,
        open: mine,
        retryAfterSeconds: OBSERVER_RETRY_AFTER_SECONDS,
        detail:
          `the principal holds ${mine} open event streams on this publication process, the most it may ` +
          `(RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL=${caps.perPrincipal}); close one, or retry in ${OBSERVER_RETRY_AFTER_SECONDS} s`,
      },
    };
  }
  if (counts.open >= caps.perProcess) {
    return {
      admitted: false,
      refusal: {
        status: 503,
        code: 'observer_capacity',
        setting: 'RUNPLANE_OBSERVER_STREAMS_MAX',
        limit: caps.perProcess,
        open: counts.open,
        retryAfterSeconds: OBSERVER_RETRY_AFTER_SECONDS,
        detail:
          `this publication process holds ${counts.open} open event streams, the most it may ` +
          `(RUNPLANE_OBSERVER_STREAMS_MAX=${caps.perProcess}); retry in ${OBSERVER_RETRY_AFTER_SECONDS} s`,
      },
    };
  }
  return { admitted: true };
}

/**
 * The process's counts of open streams ({@link ObserverCounts}), decided on and changed in one
 * synchronous step, so two requests never both take the last place.
 */
export class ObserverGate {
  private counts: ObserverCounts = initialObserverCounts;

  constructor(private readonly caps: ObserverCaps) {}

  /** The counts now. */
  get current(): ObserverCounts {
    return this.counts;
  }

  /**
   * Admits one stream of `principal` and counts it, or refuses it (nothing counted).
   * @returns on admission, `release`: ends the stream's count; only its first call counts, so it
   *   may be called from every path by which a stream ends.
   */
  open(principal: ObserverPrincipal): { admitted: true; release: () => void } | { admitted: false; refusal: ObserverRefusal } {
    const decision = decideObserver({ type: 'OpenObserver', principal }, this.counts, this.caps);
    if (!decision.admitted) return decision;
    this.counts = evolveObservers(this.counts, { type: 'ObserverOpened', principal });
    let released = false;
    return {
      admitted: true,
      release: () => {
        if (released) return;
        released = true;
        this.counts = evolveObservers(this.counts, { type: 'ObserverClosed', principal });
      },
    };
  }
}
