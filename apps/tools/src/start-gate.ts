/**
 * A call's start gate: one Int32 shared by the executor and the thread the call is given to. Each
 * side moves it once away from `waiting`, atomically, and the first to do so decides: a thread
 * that begins the call makes a refusal impossible, and a refused call is never begun. So
 * `not_started` is never recorded for a call that ran (K5), however late the thread's `started`
 * message reaches the executor.
 */
const WAITING = 0;
const BEGUN = 1;
const REFUSED = 2;

export type StartGate = Int32Array;

export function newStartGate(): StartGate {
  return new Int32Array(new SharedArrayBuffer(4));
}

/** The thread: true when it may begin the call (the executor did not refuse it first). */
export function tryBegin(gate: StartGate): boolean {
  return Atomics.compareExchange(gate, 0, WAITING, BEGUN) === WAITING;
}

/** The executor: true when the call is refused before any thread began it. */
export function tryRefuse(gate: StartGate): boolean {
  return Atomics.compareExchange(gate, 0, WAITING, REFUSED) === WAITING;
}
