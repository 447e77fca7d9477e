import { describe, expect, it } from '@jest/globals';
import { assignPartitions, parseRunSubject, partitionOf, partitionsOf, runSubject } from '@runplane/eventlog';

/** Deterministic pseudo-random member ids (uuid-like), so a failure reproduces. */
function membersOf(seed: number, n: number): string[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x ^ (x >>> 15), 0x2c1b3c6d) + 0x297a2d39) >>> 0;
    return `${x.toString(16).padStart(8, '0')}-4a1b-4c2d-8e3f-${(x * 7).toString(16).slice(0, 12).padStart(12, '0')}`;
  });
}

const owners = (m: Map<string, number[]>): Map<number, string> => new Map([...m].flatMap(([member, ps]) => ps.map((p) => [p, member] as const)));

describe('partitionOf (FNV-1a 32-bit, like NATS partition())', () => {
  it('is FNV-1a of the UTF-8 bytes modulo P, stable for a Run id, within [0, P)', () => {
    // reference values of FNV-1a 32: "" = 0x811c9dc5, "a" = 0xe40c292c, "foobar" = 0xbf9cf968
    expect(partitionOf('', 0x7fffffff)).toBe(0x811c9dc5 % 0x7fffffff);
    expect(partitionOf('a', 1_000_000_007)).toBe(0xe40c292c % 1_000_000_007);
    expect(partitionOf('foobar', 1_000_000_007)).toBe(0xbf9cf968 % 1_000_000_007);
    for (const id of ['run-1', '0b9f3c2e-4a1b-4c2d-8e3f-000000000001', 'é']) {
      for (const p of [1, 2, 8, 256]) {
        const v = partitionOf(id, p);
        expect(v).toBe(partitionOf(id, p));
        expect(v >= 0 && v < p).toBe(true);
      }
    }
  });

  it('spreads Run ids evenly: 8,000 uuid-like ids over 8 partitions, each within 10 % of 1,000', () => {
    const counts = new Array<number>(8).fill(0);
    for (const id of membersOf(7, 8000)) counts[partitionOf(id, 8)]!++;
    for (const c of counts) expect(Math.abs(c - 1000)).toBeLessThan(100);
  });

  it('puts the partition last in the subject, so <prefix>.run.<runId>.> still reads a Run', () => {
    const space = { stream: 'S', prefix: 'rp', partitions: 8 };
    const subject = runSubject(space, 'run-1', 'tools');
    expect(subject).toBe(`rp.run.run-1.tools.${partitionOf('run-1', 8)}`);
    expect(parseRunSubject('rp', subject)).toEqual({ runId: 'run-1', owner: 'tools', partition: partitionOf('run-1', 8) });
    expect(parseRunSubject('rp', 'rp.run.run-1.tools')).toBeNull();
    expect(parseRunSubject('rp', 'rp.run.run-1.tools.x')).toBeNull();
  });
});

describe('assignPartitions (rendezvous hashing with bounded load)', () => {
  it('given members, every partition has exactly one owner, each member floor(P/n) or ceil(P/n), whatever the order of the list', () => {
    for (const P of [1, 2, 7, 8, 16, 256]) {
      for (const n of [1, 2, 3, 5, 8, 9]) {
        const members = membersOf(P * 31 + n, n);
        const map = assignPartitions(P, members);
        const all = [...map.values()].flat().sort((a, b) => a - b);
        expect(all).toEqual(Array.from({ length: P }, (_, i) => i));
        for (const ps of map.values()) {
          expect(ps.length).toBeGreaterThanOrEqual(Math.floor(P / n));
          expect(ps.length).toBeLessThanOrEqual(Math.ceil(P / n));
        }
        expect(assignPartitions(P, [...members].reverse())).toEqual(map);
        for (const m of members) expect(partitionsOf(P, members, m)).toEqual(map.get(m));
      }
    }
    expect(assignPartitions(8, [])).toEqual(new Map());
    expect(partitionsOf(8, ['a'], 'b')).toEqual([]);
  });

  it('gives the same assignment in every version: replicas of two releases side by side in a rollout must agree on who owns what', () => {
    // computed once and kept: a change here makes two versions' replicas disagree, so a partition neither
    // claims waits unconsumed until the rollout ends (one both claim is pinned to one of them by the server)
    expect([...assignPartitions(8, ['runtime-7f3a2c', 'runtime-b81d0e', 'runtime-é9'])]).toEqual([
      ['runtime-7f3a2c', [0, 1, 7]],
      ['runtime-b81d0e', [2, 4]],
      ['runtime-é9', [3, 5, 6]],
    ]);
  });

  it("given a member leaving, all its partitions move and the others' mostly stay (measured: under one extra move on average)", () => {
    const extra: number[] = [];
    for (let seed = 1; seed <= 200; seed++) {
      for (const n of [2, 3, 4, 8]) {
        const members = membersOf(seed * 10 + n, n);
        const before = owners(assignPartitions(8, members));
        const leaving = members[seed % n]!;
        const after = owners(
          assignPartitions(
            8,
            members.filter((m) => m !== leaving),
          ),
        );
        let moved = 0;
        for (let p = 0; p < 8; p++) {
          if (before.get(p) === leaving) expect(after.get(p)).not.toBe(leaving);
          else if (after.get(p) !== before.get(p)) moved++;
        }
        extra.push(moved);
      }
    }
    const mean = extra.reduce((a, b) => a + b, 0) / extra.length;
    process.stdout.write(
      `PARTITIONS | a member leaving: partitions moved besides its own, mean ${mean.toFixed(2)}, max ${Math.max(...extra)} (P=8, 2-8 members, 800 cases)\n`,
    );
    expect(mean).toBeLessThan(1);
  });

  it('given a new member, it takes a fair share (floor or ceil of P/(n+1)) and partitions move only to it, mostly', () => {
    const extra: number[] = [];
    for (let seed = 1; seed <= 200; seed++) {
      for (const n of [1, 2, 3, 7]) {
        const members = membersOf(seed * 10 + n, n + 1);
        const newcomer = members[n]!;
        const before = owners(assignPartitions(8, members.slice(0, n)));
        const map = assignPartitions(8, members);
        expect(map.get(newcomer)!.length).toBeGreaterThanOrEqual(Math.floor(8 / (n + 1)));
        const after = owners(map);
        let moved = 0;
        for (let p = 0; p < 8; p++) if (after.get(p) !== newcomer && after.get(p) !== before.get(p)) moved++;
        extra.push(moved);
      }
    }
    const mean = extra.reduce((a, b) => a + b, 0) / extra.length;
    process.stdout.write(
      `PARTITIONS | a member joining: partitions moved between the old members, mean ${mean.toFixed(2)}, max ${Math.max(...extra)} (P=8, 800 cases)\n`,
    );
    expect(mean).toBeLessThan(1);
  });
});
