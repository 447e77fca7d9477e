/**
 * `startOnFreePorts`: a start whose port was taken meanwhile (`PortTaken`) is run again, at most
 * `PORT_ATTEMPTS` times in all (kit policy `portTaken`); any other failure, and the last clash, reach
 * the caller as the start's own error. The servers' starts that use it are tried with a port really
 * taken in stack-start.test.ts.
 */
import { describe, expect, it } from '@jest/globals';
import { PORT_ATTEMPTS, PortTaken, startOnFreePorts } from '@runplane/devstack/nats-server';

describe('startOnFreePorts', () => {
  it('given a start whose port is taken twice, when it runs, then the third attempt is what it returns', async () => {
    const attempts: number[] = [];
    const started = await startOnFreePorts(async (attempt) => {
      attempts.push(attempt);
      if (attempt < 3) throw new PortTaken(new Error(`port ${4000 + attempt}: address already in use`));
      return `server on ${4000 + attempt}`;
    });
    expect(started).toBe('server on 4003');
    expect(attempts).toEqual([1, 2, 3]);
  });

  it('given every attempt meets a taken port, when it runs, then it gives up after PORT_ATTEMPTS with the last start error itself', async () => {
    let n = 0;
    const last = new Error('nats-server failed to start: exited (1) at nats://127.0.0.1:4003');
    await expect(
      startOnFreePorts(async () => {
        n++;
        throw new PortTaken(n === PORT_ATTEMPTS ? last : new Error(`attempt ${n}`));
      }),
    ).rejects.toBe(last);
    expect(PORT_ATTEMPTS).toBe(3);
    expect(n).toBe(PORT_ATTEMPTS);
  });

  it('given a start that fails for another reason, when it runs, then it is not run again', async () => {
    let n = 0;
    const failure = new Error('nats-server failed to start: did not answer within 15 s');
    await expect(
      startOnFreePorts(async () => {
        n++;
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(n).toBe(1);
  });
});
