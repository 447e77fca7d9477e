/**
 * What a service logs of its NATS connection (nest.ts `logConnectionChanges`): an operator sees a
 * stale connection (a hung server left), a disconnection with the server left, and the reconnection
 * with the server now used; the client's other notices are not logged.
 */
import { describe, expect, it } from '@jest/globals';
import { logConnectionChanges, type ConnectionStatus } from '../src/nest.js';

async function* statuses(list: ConnectionStatus[]): AsyncIterable<ConnectionStatus> {
  for (const s of list) yield s;
}

describe('logConnectionChanges', () => {
  it('given a hung server left for another node, then stale, lost (with the server left) and back (with the new one) are logged, nothing else', async () => {
    const lines: { level: string; fields: object; message: string }[] = [];
    const logger = {
      warn: (fields: object, message: string) => void lines.push({ level: 'warn', fields, message }),
      log: (fields: object, message: string) => void lines.push({ level: 'log', fields, message }),
    };
    await logConnectionChanges(
      statuses([
        { type: 'ping' },
        { type: 'staleConnection' },
        { type: 'disconnect', server: '127.0.0.1:4301' },
        { type: 'reconnecting' },
        { type: 'reconnecting' },
        { type: 'reconnect', server: '127.0.0.1:4302' },
        { type: 'update' },
      ]),
      logger,
    );
    expect(lines).toEqual([
      { level: 'warn', fields: {}, message: 'the NATS server stopped answering pings: leaving it (a stale connection)' },
      { level: 'warn', fields: { server: '127.0.0.1:4301' }, message: 'NATS connection lost: reconnecting' },
      { level: 'log', fields: { server: '127.0.0.1:4302' }, message: 'NATS connection back' },
    ]);
  });

  it('given a status stream that fails (a closed connection), then it resolves without throwing', async () => {
    // eslint-disable-next-line require-yield
    async function* failing(): AsyncIterable<ConnectionStatus> {
      throw new Error('connection closed');
    }
    await expect(logConnectionChanges(failing(), { warn: () => undefined, log: () => undefined })).resolves.toBeUndefined();
  });
});
