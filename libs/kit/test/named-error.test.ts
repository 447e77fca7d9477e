import { describe, expect, it } from '@jest/globals';
import { NamedError } from '@runplane/kit/named-error';

class WaitConflict extends NamedError {}
class RunAlreadySettled extends NamedError {
  constructor(readonly outcome: string) {
    super(`the Run is already settled (${outcome})`);
  }
}

describe('NamedError', () => {
  it('names an error by its own class, with or without a constructor of its own, and stays an Error', () => {
    const plain = new WaitConflict('answered before');
    expect(plain.name).toBe('WaitConflict');
    expect(String(plain)).toBe('WaitConflict: answered before');
    expect(plain).toBeInstanceOf(Error);
    const settled = new RunAlreadySettled('completed');
    expect(settled.name).toBe('RunAlreadySettled');
    expect(settled.outcome).toBe('completed');
  });
});
