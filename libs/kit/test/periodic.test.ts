import { describe, expect, it } from '@jest/globals';
import { Periodic } from '@runplane/kit';

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
