/**
 * Event signing keys for a local stack (`runplane up`, the demo, the end-to-end tests, the bench):
 * an Ed25519 key pair per owner made here, each private key in a file of its own (0600) that only
 * its service is given (`RUNPLANE_SIGNING_KEY_FILE`), and the public keys in one file every reader
 * is given (`RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`), as a deployment mounts them from Secrets and a
 * ConfigMap (docs/operations.md "Event signing keys"). Made fresh on every start, never stored in
 * the repository.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Owner } from '@runplane/contracts';

/** The signing files of a local stack. */
export interface DevSigning {
  /** JSON `{ "<owner>": ["<SPKI PEM>"] }`: every reader's `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`. */
  publicKeysFile: string;
  /** PKCS#8 PEM private key file of each owner: that service's `RUNPLANE_SIGNING_KEY_FILE`. */
  keyFiles: Readonly<Record<Owner, string>>;
}

/**
 * Makes an Ed25519 key pair per owner and writes `<owner>.key.pem` (0600) and `public-keys.json`
 * into `dir` (created), replacing earlier ones.
 */
export function createDevSigning(dir: string): DevSigning {
  mkdirSync(dir, { recursive: true });
  const keyFiles = {} as Record<Owner, string>;
  const publicKeys: Record<string, string[]> = {};
  for (const owner of Owner.options) {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    keyFiles[owner] = join(dir, `${owner}.key.pem`);
    writeFileSync(keyFiles[owner], privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
    publicKeys[owner] = [publicKey.export({ format: 'pem', type: 'spki' }).toString()];
  }
  const publicKeysFile = join(dir, 'public-keys.json');
  writeFileSync(publicKeysFile, `${JSON.stringify(publicKeys, null, 2)}\n`);
  return { publicKeysFile, keyFiles };
}

/**
 * The signing settings of a process named `name`: every process gets the public keys; a service
 * that owns facts (an {@link Owner}) also gets its own private key.
 */
export function signingEnvOf(signing: DevSigning, name: string): { RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: string; RUNPLANE_SIGNING_KEY_FILE?: string } {
  const owner = Owner.safeParse(name);
  return {
    RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: signing.publicKeysFile,
    ...(owner.success ? { RUNPLANE_SIGNING_KEY_FILE: signing.keyFiles[owner.data] } : {}),
  };
}
