/**
 * Event signing keys for a local stack (`runplane up`, the demo, the end-to-end tests, the bench):
 * an Ed25519 key pair per owner made here, each private key in a file of its own (0600) that only
 * its service is given (`RUNPLANE_SIGNING_KEY_FILE`), and the public keys in one file every reader
 * is given (`RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`), as a deployment mounts them from Secrets and a
 * ConfigMap (docs/operations.md "Event signing keys"). Kept in the stack's state folder beside its
 * JetStream store (never in the repository): a store kept between runs keeps its keys, or the
 * events of earlier runs would no longer verify.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Owner } from '@runplane/contracts';

/** The signing files of a local stack. */
export interface DevSigning {
  /** JSON `{ "<owner>": ["<SPKI PEM>"] }`: every reader's `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`. */
  publicKeysFile: string;
  /** PKCS#8 PEM private key file of each owner: that service's `RUNPLANE_SIGNING_KEY_FILE`. */
  keyFiles: Readonly<Record<Owner, string>>;
}

/** The Ed25519 private key in `file`, or null when there is none (or it is not one). */
function keptKey(file: string): KeyObject | null {
  if (!existsSync(file)) return null;
  try {
    const key = createPrivateKey(readFileSync(file, 'utf8'));
    return key.asymmetricKeyType === 'ed25519' ? key : null;
  } catch {
    return null;
  }
}

/**
 * Keeps the Ed25519 key of each owner found in `dir` (`<owner>.key.pem`) and makes one for each
 * owner without a valid one (0600), then writes `public-keys.json` for them, in `dir` (created).
 */
export function createDevSigning(dir: string): DevSigning {
  mkdirSync(dir, { recursive: true });
  const keyFiles = {} as Record<Owner, string>;
  const publicKeys: Record<string, string[]> = {};
  for (const owner of Owner.options) {
    keyFiles[owner] = join(dir, `${owner}.key.pem`);
    let privateKey = keptKey(keyFiles[owner]);
    if (!privateKey) {
      privateKey = generateKeyPairSync('ed25519').privateKey;
      writeFileSync(keyFiles[owner], privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
    }
    publicKeys[owner] = [createPublicKey(privateKey).export({ format: 'pem', type: 'spki' }).toString()];
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
