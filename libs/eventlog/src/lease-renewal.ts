/**
 * What a failed lease renewal means, decided from what the bucket says afterwards (pure, so the
 * NATS-outage paths are unit-tested without an outage). Only positive evidence that somebody else
 * changed the lease is a loss (K6); an unreachable NATS is not (K10: a NATS restart does not
 * interrupt healthy Runs).
 */
import type { HeldLease, LeaseEntry } from './leases.js';

/**
 * The verdict on a renewal that threw:
 * - `retry`: the bucket could not be read (NATS unreachable or restarting), or the key is absent
 *   (a server restarted without its store, or recovery's clean-up after settlement): keep the
 *   lease and try again on the next tick; the Run's log still decides, since a settled or fenced
 *   Run ends execution at its next wake and a fence refuses any write;
 * - `adopt`: the entry is still held by this instance under the same epoch, at another revision
 *   (a renewal buffered or timed out during an outage was stored after all): keep executing, with
 *   `revision` as the lease's new revision;
 * - `lost`: the entry is fenced, released, or held by another instance or epoch: stop
 *   executing the Run at once (the fence on its subjects refuses anything still attempted).
 */
export type RenewalVerdict = { kind: 'retry' } | { kind: 'adopt'; revision: number } | { kind: 'lost'; state: LeaseEntry['value']['state'] };

/**
 * Decides what a failed renewal of `lease` means.
 * @param current the lease's entry read after the failure: `undefined` when the read itself
 *   failed, `null` when the key does not exist.
 * @param instance this process's writer instance id.
 */
export function renewalVerdict(lease: HeldLease, current: LeaseEntry | null | undefined, instance: string): RenewalVerdict {
  if (current === undefined || current === null) return { kind: 'retry' };
  const v = current.value;
  if (v.state === 'held' && v.epoch === lease.epoch && v.holder.instance === instance) return { kind: 'adopt', revision: current.revision };
  return { kind: 'lost', state: v.state };
}
