/**
 * A free port that stays free until it is bound later: chosen below the kernel's ephemeral range
 * (`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 by default), where no outgoing
 * connection is given a local port. A port picked free in the ephemeral range can be taken by any
 * connection another process opens before the listener binds it: a stack's admission, whose port
 * is chosen before publication starts (the Run viewer is told it first), failed with EADDRINUSE
 * when tests ran beside each other.
 */
import { readFileSync } from 'node:fs';
import getPort from 'get-port';

/** Lowest ephemeral port of this machine (Linux `ip_local_port_range`), 32768 when it cannot be read. */
export function ephemeralPortLow(file = '/proc/sys/net/ipv4/ip_local_port_range'): number {
  try {
    const low = Number(readFileSync(file, 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 1024 ? low : 32768;
  } catch {
    return 32768;
  }
}

/**
 * A port free on `host` now, taken at random from the 12,000 below the ephemeral range (at least
 * 10000), so that two stacks starting at once rarely try the same one. Falls back to any free
 * port (get-port's) when none of 64 candidates is free.
 */
export async function freePortOutsideEphemeral(host: string): Promise<number> {
  const high = ephemeralPortLow() - 1;
  const low = Math.max(10_000, high - 12_000);
  if (high <= low) return getPort({ host });
  const candidates = Array.from({ length: 64 }, () => low + Math.floor(Math.random() * (high - low + 1)));
  return getPort({ host, port: candidates });
}
