/**
 * What a service logs of its NATS connection (nest.ts `logConnectionChanges`): an operator sees a
 * stale connection (a hung server left), a disconnection with the server left, and the reconnection
 * with the server now used, each by address and by node name (as `/readyz` names it), and what a
 * server refused (credentials on one node); the client's other notices are not logged. (Against a real cluster, a client whose node n3 was
 * stopped logged `{server: <n3's address>, node: 'n3'}` lost, then `node: 'n1'` back.)
 */
import { describe, expect, it } from '@jest/globals';
import { connectionChangeCounts } from '../src/log-metrics.js';
import { logConnectionChanges, type ConnectionStatus } from '../src/nest.js';

/** The statuses in order; a status's `then` runs once it was handed over (the client moving to another node meanwhile). */
async function* statuses(list: (ConnectionStatus & { then?: () => void })[]): AsyncIterable<ConnectionStatus> {
  for (const { then, ...s } of list) {
    yield s;
    then?.();
  }
}

describe('logConnectionChanges', () => {
  it('given a hung server left for another node, then stale, lost (with the server left) and back (with the new one) are logged, nothing else', async () => {
    const lines: { level: string; fields: object; message: string }[] = [];
    const logger = {
      warn: (fields: object, message: string) => void lines.push({ level: 'warn', fields, message }),
      log: (fields: object, message: string) => void lines.push({ level: 'log', fields, message }),
    };
    let connectedTo = 'n3';
    await logConnectionChanges(
      statuses([
        { type: 'ping' },
        { type: 'staleConnection' },
        { type: 'disconnect', server: '127.0.0.1:4301' },
        { type: 'reconnecting' },
        { type: 'reconnecting', then: () => (connectedTo = 'n1') },
        { type: 'reconnect', server: '127.0.0.1:4302' },
        { type: 'update' },
      ]),
      logger,
      () => connectedTo,
    );
    expect(lines).toEqual([
      { level: 'warn', fields: { node: 'n3' }, message: 'the NATS server stopped answering pings: leaving it (a stale connection)' },
      { level: 'warn', fields: { server: '127.0.0.1:4301', node: 'n3' }, message: 'NATS connection lost: reconnecting' },
      { level: 'log', fields: { server: '127.0.0.1:4302', node: 'n1' }, message: 'NATS connection back' },
    ]);
  });

  it('given a node that refuses the service its credentials, when the client tries it, then the refusal is logged and the failed attempt names that server, not the last node', async () => {
    const lines: { level: string; fields: object; message: string }[] = [];
    const logger = {
      warn: (fields: object, message: string) => void lines.push({ level: 'warn', fields, message }),
      log: (fields: object, message: string) => void lines.push({ level: 'log', fields, message }),
    };
    const refused = Object.assign(new Error("'Authorization Violation'"), { name: 'AuthorizationError' });
    const before = new Map(connectionChangeCounts());
    await logConnectionChanges(
      statuses([
        { type: 'disconnect', server: '127.0.0.1:4302' }, // n2, where it was, restarted
        { type: 'reconnecting' },
        { type: 'error', error: refused }, // n3 answers, and refuses the password
        { type: 'disconnect', server: '127.0.0.1:4303' },
        { type: 'reconnect', server: '127.0.0.1:4301' },
      ]),
      logger,
      () => 'n2',
      () => '127.0.0.1:4302',
    );
    expect(lines).toEqual([
      { level: 'warn', fields: { server: '127.0.0.1:4302', node: 'n2' }, message: 'NATS connection lost: reconnecting' },
      {
        level: 'warn',
        fields: { err: "'Authorization Violation'", kind: 'AuthorizationError' },
        message: 'the NATS server reported an error for this connection (credentials refused, an operation not permitted)',
      },
      { level: 'warn', fields: { server: '127.0.0.1:4303' }, message: 'NATS connection attempt failed after the server answered: trying another' },
      { level: 'log', fields: { server: '127.0.0.1:4301', node: 'n2' }, message: 'NATS connection back' },
    ]);
    // what runplane_nats_connection_changes_total{change} counts
    const added = Object.fromEntries([...connectionChangeCounts()].map(([k, n]) => [k, n - (before.get(k) ?? 0)]));
    expect(added).toMatchObject({ lost: 1, error: 1, 'attempt-failed': 1, back: 1 });
  });

  it('given a server that does not tell its name, then the lines name the address only', async () => {
    const lines: object[] = [];
    const logger = { warn: (fields: object) => void lines.push(fields), log: (fields: object) => void lines.push(fields) };
    await logConnectionChanges(
      statuses([
        { type: 'disconnect', server: '127.0.0.1:4301' },
        { type: 'reconnect', server: '127.0.0.1:4301' },
      ]),
      logger,
    );
    expect(lines).toEqual([{ server: '127.0.0.1:4301' }, { server: '127.0.0.1:4301' }]);
  });

  it('given a status stream that fails (a closed connection), then it resolves without throwing', async () => {
    // eslint-disable-next-line require-yield
    async function* failing(): AsyncIterable<ConnectionStatus> {
      throw new Error('connection closed');
    }
    await expect(logConnectionChanges(failing(), { warn: () => undefined, log: () => undefined })).resolves.toBeUndefined();
  });
});
