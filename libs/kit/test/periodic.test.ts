import { describe, expect, it } from '@jest/globals';
import { InTurn, Periodic } from '@runplane/kit';

describe('Periodic', () => {
  it('given a pass every 30 s made at 0, then due first at 30 s, not again before 60 s', () => {
    const pass = new Periodic(30_000, 0);
    expect(pass.due(29_999)).toBe(false);
    expect(pass.due(30_000)).toBe(true);
    expect(pass.due(30_001)).toBe(false);
    expect(pass.due(59_999)).toBe(false);
    expect(pass.due(61_000)).toBe(true);
    expect(pass.due(90_999)).toBe(false);
    expect(pass.due(91_000)).toBe(true);
  });
});

describe('InTurn', () => {
  it('given 5 items and a batch of 2, then each pass takes the next 2, wrapping, and every item is reached in 3 passes', () => {
    const turn = new InTurn(2);
    const items = ['a', 'b', 'c', 'd', 'e'];
    expect(turn.next(items)).toEqual(['a', 'b']);
    expect(turn.next(items)).toEqual(['c', 'd']);
    expect(turn.next(items)).toEqual(['e', 'a']);
    expect(turn.next(items)).toEqual(['b', 'c']);
  });

  it('given no more items than the batch, then a pass takes them all', () => {
    expect(new InTurn(200).next([1, 2, 3])).toEqual([1, 2, 3]);
  });

  it('given the list shrank between passes, then the next pass still takes a full batch from within it', () => {
    const turn = new InTurn(3);
    turn.next([1, 2, 3, 4, 5, 6, 7, 8]);
    turn.next([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(turn.next([1, 2, 3, 4])).toEqual([3, 4, 1]);
  });
});
