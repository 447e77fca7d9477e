import { connect, errors, type ConnectionOptions, type NatsConnection, type Server } from '@nats-io/transport-node';
import { retry } from '@runplane/kit/retry';

/**
 * How a client leaves a server that hangs while the TCP connection stays open (a nats-server
 * frozen, its VM paused: nothing closes the socket, so nothing else says it is gone), for another
 * node of a cluster:
 * - `pingInterval`, `maxPingOut`: it sends a PING every 2 s and, when 2 are still unanswered at the
 *   next, drops the connection as stale (4-6 s after the server stopped answering). A pong is read
 *   by the event loop that runs the timer, so a busy loop delays both alike and is not taken for a
 *   stale server.
 * - `timeout`: a connection attempt (TCP, the server's INFO, TLS, CONNECT and its PONG) gives up
 *   after 5 s (the client's default is 20 s): a frozen server's kernel still accepts the TCP connection.
 * - `reconnectToServer`: {@link leastRecentlyDialed}, so a reconnection tries the other nodes before
 *   the one it has just left (the client's rotation tried that one first).
 * So a hung node is left after about 5-8 s (6.7-7.2 s measured; 7.1-14.5 s while the node just left
 * was dialed first), well below a lease's default TTL
 * (15 s), where the client's defaults (a PING every 2 minutes, then 20 s) took 4-6 minutes and
 * every Run of the partitions whose service sat on that node stalled meanwhile
 * (test/e2e/nats-cluster.test.ts freezes the runtime's node with SIGSTOP). Every connection of the services uses it (the event
 * log's, the heartbeat worker's, a downstream consumer's).
 */
export const STALE_CONNECTION_OPTIONS = {
  pingInterval: 2_000,
  maxPingOut: 2,
  timeout: 5_000,
  reconnectToServer: leastRecentlyDialed,
} as const;

/**
 * Which server a (re)connection dials next: the one of `pool` dialed least recently (`lastConnect`,
 * epoch ms, 0 for never), the client's own pick (`pool[0]`) on a tie. The client's rotation dials
 * the server it has just left first, and a frozen node's kernel still accepts the TCP connection,
 * so that attempt alone cost the whole 5 s `timeout` before another node was tried; a CI run saw a
 * runtime leave a frozen node after its Runs' 15 s leases had expired, and 4 of 6 Runs were
 * interrupted. Dialing the least recently dialed server tries every other node before coming back to
 * the one just left, and still comes back to it when it is the only one.
 * @returns a server of `pool`; `null` (the client's own pick) for an empty pool.
 */
export function leastRecentlyDialed(pool: ReadonlyArray<Server>): Server | null {
  let pick: Server | null = null;
  for (const s of pool) if (!pick || s.lastConnect < pick.lastConnect) pick = s;
  return pick;
}

/**
 * `connect(options)` with {@link STALE_CONNECTION_OPTIONS}' 5 s bound per attempt, made again when
 * an attempt times out (kit `firstNatsConnect`: four attempts in all, as patient as the client's
 * own 20 s), so a first connection on a loaded machine is not refused sooner than before.
 * @throws what the last attempt threw; a refusal (no server listening, bad credentials, an
 *   untrusted certificate) at once.
 */
export function connectPatiently(options: ConnectionOptions): Promise<NatsConnection> {
  return retry('firstNatsConnect', () => connect({ ...STALE_CONNECTION_OPTIONS, ...options }), {
    shouldRetry: ({ error }) => error instanceof errors.TimeoutError,
  });
}
