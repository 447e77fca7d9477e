/**
 * Per-user reply subjects (docs/operations.md "NATS users and permissions"). Every request a client makes (JetStream API calls, KV gets
 * and watches, object store gets, consumer fetches and ordered consumers) is answered on a
 * subject under the connection's inbox prefix. With the client default (`_INBOX`) and a broker
 * that lets every user subscribe `_INBOX.>`, any user could read the replies of every other: the
 * downstream user (`downstream-1`..) would see the leases, claims, heartbeats and tool results the
 * services fetch. So each NATS user has its own prefix, the broker lets it subscribe only that
 * ({@link busPermissions}), and every connection made as a user sets it ({@link natsUserOptions}).
 * This module is the one source of both; it imports nothing, so the heartbeat worker thread can
 * load it.
 */

/**
 * The inbox prefix of a NATS user: `_INBOX_<user name>` (e.g. `_INBOX_downstream-1`). The
 * broker allows the user to subscribe `<prefix>.>` and nothing else under an inbox.
 * @param natsUser the NATS user name as connected with (`NATS_USER`, e.g. `downstream-1`).
 * @throws RangeError when the name is empty or holds white space, `.`, `*` or `>`: it would not
 *   be one subject token, and a name with a `.` would make another user's prefix a prefix of it.
 */
export function inboxPrefixOf(natsUser: string): string {
  if (!/^[^\s.*>]+$/.test(natsUser))
    throw new RangeError(
      `NATS user name ${JSON.stringify(natsUser)} cannot name an inbox: it must be one subject token (no white space, ".", "*" or ">")`,
    );
  return `_INBOX_${natsUser}`;
}

/**
 * The connect options of a connection made as a NATS user: the user, its password and its inbox
 * prefix ({@link inboxPrefixOf}), so the client's replies come where the broker lets the user
 * subscribe. Without a user (a server without authorization, which nothing in the project runs
 * but the tests proving such a client is refused), nothing: the client default `_INBOX`.
 * @throws RangeError as {@link inboxPrefixOf}.
 */
export function natsUserOptions(
  user: string | undefined,
  pass: string | undefined,
): { user: string; pass: string; inboxPrefix: string } | Record<string, never> {
  return user ? { user, pass: pass ?? '', inboxPrefix: inboxPrefixOf(user) } : {};
}
