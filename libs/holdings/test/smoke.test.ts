import { describe, it, expect } from '@jest/globals';
describe('smoke', () => { it('runs', () => { expect(1 + 1).toBe(2); }); });
