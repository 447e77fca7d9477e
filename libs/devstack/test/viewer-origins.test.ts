/** The origins a development stack lets admission answer CORS for: where the Run viewer is opened from. */
import { describe, expect, it } from '@jest/globals';
import { viewerOrigins } from '@runplane/devstack';

describe('viewerOrigins', () => {
  it('given publication on loopback, then its origin under both loopback names; elsewhere, its origin only', () => {
    expect(viewerOrigins('http://127.0.0.1:8082')).toEqual(['http://127.0.0.1:8082', 'http://localhost:8082']);
    expect(viewerOrigins('http://localhost:41234/')).toEqual(['http://localhost:41234', 'http://127.0.0.1:41234']);
    expect(viewerOrigins('https://publication.runplane.example.com')).toEqual(['https://publication.runplane.example.com']);
  });
});
