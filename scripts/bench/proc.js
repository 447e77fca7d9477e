// Process accounting for the bench: CPU time (utime + stime from /proc/<pid>/stat, all threads of
// the process) and resident memory (VmRSS from /proc/<pid>/status), and the PostgreSQL backend
// processes serving given databases.
import { readFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';

/** Clock ticks per second of /proc/<pid>/stat times (getconf CLK_TCK, usually 100). */
export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of a process in clock ticks, or null when it is gone. */
export async function cpuTicks(pid) {
  const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (text === null) return null;
  // Fields after the command name (which may contain spaces) start at field 3; utime/stime are 14/15.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return Number(rest[11]) + Number(rest[12]);
}

/** Resident set size of a process in KiB (VmRSS), or null when it is gone. */
export async function rssKiB(pid) {
  const text = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => null);
  const m = text && /VmRSS:\s+(\d+)/.exec(text);
  return m ? Number(m[1]) : null;
}

/** PIDs of the PostgreSQL backends connected to any of `databases` (pg_stat_activity). */
export async function pgBackendPids(pgClient, databases) {
  if (databases.length === 0) return [];
  const r = await pgClient.query('SELECT pid FROM pg_stat_activity WHERE datname = ANY($1) AND pid <> pg_backend_pid()', [databases]);
  return r.rows.map((x) => x.pid);
}

/**
 * Measures the CPU time of a changing set of processes over an interval: `pids()` is asked at the
 * start and at the end; a process seen only at the end counts from 0 (it started in between), a
 * process gone at the end counts up to its last reading (so a short-lived process is missed).
 */
export class CpuMeter {
  /** @param {() => Promise<number[]>} pids */
  constructor(pids) {
    this.pids = pids;
    this.start = new Map();
  }

  /** Takes the starting readings. */
  async begin() {
    this.start = new Map();
    for (const pid of await this.pids()) this.start.set(pid, (await cpuTicks(pid)) ?? 0);
  }

  /** CPU milliseconds used by the processes since `begin()`; each process's share in `lastByPid`. */
  async end() {
    const pids = new Set([...this.start.keys(), ...(await this.pids())]);
    let ticks = 0;
    /** @type {Map<number, number>} CPU ms per process of the last interval */
    this.lastByPid = new Map();
    for (const pid of pids) {
      const now = await cpuTicks(pid);
      if (now === null) continue;
      ticks += now - (this.start.get(pid) ?? 0);
      this.lastByPid.set(pid, ((now - (this.start.get(pid) ?? 0)) * 1000) / CLK_TCK);
    }
    return (ticks * 1000) / CLK_TCK;
  }
}
