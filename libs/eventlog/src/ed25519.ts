/**
 * Ed25519 signature checks for the readers of the log (signing.ts `SignatureVerifier`), through
 * libsodium (`sodium-native`, `crypto_sign_verify_detached`) when it loads, else through
 * `node:crypto`. Every service checks each event of its partitions once (about 120 checks per W1
 * Run over the seven services), and `node:crypto`'s one-shot `verify` (OpenSSL 3) costs about twice
 * libsodium's CPU per check (`node libs/eventlog/scripts/signing-cost.mjs` times both;
 * docs/performance.md). Both check RFC 8032 signatures: what the log's signers make, both accept;
 * libsodium also refuses small-order and non-canonical points that OpenSSL may take, so it is never
 * looser. Signing stays with `node:crypto` (once per append, not once per reader).
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';
import { createRequire } from 'node:module';

/** The one libsodium function used. */
interface Sodium {
  crypto_sign_verify_detached(signature: Buffer, message: Buffer, publicKey: Buffer): boolean;
}

/** Why libsodium could not be loaded, when it could not (a platform without its prebuilt addon: musl, say). */
let unavailable: string | null = null;

/** libsodium through sodium-native, or null when it cannot be loaded. */
function loadSodium(): Sodium | null {
  try {
    const sodium = createRequire(import.meta.url)('sodium-native') as Sodium;
    if (typeof sodium.crypto_sign_verify_detached === 'function') return sodium;
    unavailable = 'sodium-native has no crypto_sign_verify_detached';
  } catch (e) {
    unavailable = (e as Error).message;
  }
  return null;
}

const sodium = loadSodium();

/** Why signatures are checked through `node:crypto` in this process (the addon's load error), or null when through libsodium. */
export const ed25519Fallback: string | null = unavailable;

/** What checks signatures in this process: `libsodium` (sodium-native) or `node:crypto` (its fallback). */
export const ed25519Backend: 'libsodium' | 'node:crypto' = sodium ? 'libsodium' : 'node:crypto';

/** Ed25519 signature length, bytes (RFC 8032). */
const SIGNATURE_BYTES = 64;

/** The raw 32 public key bytes of each key checked with, kept per KeyObject. */
const rawKeys = new WeakMap<KeyObject, Buffer>();

/** Raw 32-byte Ed25519 public key of `key` (a public or private KeyObject). */
export function rawPublicKey(key: KeyObject): Buffer {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  const der = pub.export({ format: 'der', type: 'spki' });
  return der.subarray(der.length - 32);
}

function rawKeyOf(key: KeyObject): Buffer {
  let raw = rawKeys.get(key);
  if (!raw) {
    raw = rawPublicKey(key);
    rawKeys.set(key, raw);
  }
  return raw;
}

/**
 * True when `signature` is `key`'s Ed25519 signature over `message`.
 * @param key an Ed25519 public KeyObject (signing.ts `PublicKeySet`).
 * @param signature the signature bytes: anything but 64 bytes is false, never an error.
 */
export function verifyEd25519(key: KeyObject, message: Buffer, signature: Buffer): boolean {
  if (signature.length !== SIGNATURE_BYTES) return false;
  if (sodium) return sodium.crypto_sign_verify_detached(signature, message, rawKeyOf(key));
  return verify(null, message, key, signature);
}
