/**
 * A local stack's event signing keys (libs/devstack signing.ts): one Ed25519 key per owner, the
 * public keys every reader gets, and the same keys again on the next start, so the events a kept
 * JetStream store holds still verify.
 */
import { describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Owner } from '@runplane/contracts';
import { createDevSigning, signingEnvOf } from '../src/signing.js';
import { readPublicKeySet, readSigningKey } from '@runplane/eventlog';

describe('createDevSigning', () => {
  it('makes a key per owner whose public key is published, keeps them on the next start, and replaces a broken one only', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-devsigning-'));
    try {
      const first = createDevSigning(dir);
      const set = readPublicKeySet(first.publicKeysFile);
      const ids = Owner.options.map((o) => readSigningKey(o, first.keyFiles[o]).keyId);
      Owner.options.forEach((o, i) => expect([o, set.get(o)?.has(ids[i]!)]).toEqual([o, true]));
      expect(statSync(first.keyFiles.runtime).mode & 0o777).toBe(0o600);
      const publicText = readFileSync(first.publicKeysFile, 'utf8');

      writeFileSync(first.keyFiles.tools, 'not a key');
      const second = createDevSigning(dir);
      const again = Owner.options.map((o) => readSigningKey(o, second.keyFiles[o]).keyId);
      Owner.options.forEach((o, i) => expect([o, again[i] === ids[i]]).toEqual([o, o !== 'tools']));
      expect(readFileSync(second.publicKeysFile, 'utf8')).not.toBe(publicText);
      expect(readPublicKeySet(second.publicKeysFile).get('tools')?.has(again[Owner.options.indexOf('tools')]!)).toBe(true);

      expect(signingEnvOf(second, 'runtime')).toEqual({
        RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: second.publicKeysFile,
        RUNPLANE_SIGNING_KEY_FILE: second.keyFiles.runtime,
      });
      expect(signingEnvOf(second, 'projector')).toEqual({ RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: second.publicKeysFile });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
