/**
 * The suite's NATS servers run as a deployment's do: the shared server (test/support/global-setup.js)
 * and a private server of test/support/nats-server.ts refuse a connection without a user, and one
 * that does not verify their certificate against the suite's CA; the suite's user over TLS gets
 * JetStream. The only servers without credentials are the ones the refusal tests start on purpose.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { natsTlsOptions } from '@runplane/eventlog';
import { currentNatsServerBinary, SUITE_NATS, suiteNatsOptions, TestNatsServer } from '../support/nats-server.js';

const quick = { reconnect: false, timeout: 3_000 } as const;
/** The private server of the second block, removed after it. */
let private_: TestNatsServer | null = null;

/** Connects with `opts`, checks JetStream answers, closes. */
async function jetStreamAs(opts: Parameters<typeof connect>[0]): Promise<void> {
  const nc = await connect(opts);
  try {
    await jetstreamManager(nc, { timeout: 3_000 });
  } finally {
    await nc.close();
  }
}

describe.each([
  ['the shared server', async () => process.env.NATS_URL!],
  [
    'a private server of test/support/nats-server.ts',
    async () => (private_ = await TestNatsServer.start({ bin: currentNatsServerBinary().bin })).url,
  ],
])('%s', (_title, start) => {
  let url: string;
  beforeAll(async () => {
    url = await start();
  });
  afterAll(async () => {
    await private_?.cleanup();
    private_ = null;
  });

  it('refuses a connection without a user (over TLS, verified against the suite CA)', async () => {
    await expect(connect({ servers: url, ...quick, ...natsTlsOptions(url, process.env.NATS_CA_FILE) })).rejects.toThrow(/authorization/i);
  });

  it('refuses a wrong password', async () => {
    await expect(connect({ ...suiteNatsOptions(url, quick), pass: 'wrong' })).rejects.toThrow(/authorization/i);
  });

  it('requires TLS: a client that does not know the suite CA does not verify the certificate, and never sends the password', async () => {
    await expect(connect({ servers: url, ...quick, user: SUITE_NATS.user, pass: SUITE_NATS.pass })).rejects.toThrow(/certificate/i);
  });

  it("lets the suite's user in over TLS, with JetStream", async () => {
    await expect(jetStreamAs(suiteNatsOptions(url, quick))).resolves.toBeUndefined();
  });
});
