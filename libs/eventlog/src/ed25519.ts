/**
 * Ed25519 signature checks for the readers of the log (signing.ts `SignatureVerifier`), through
 * libsodium (`sodium-native`, `crypto_sign_verify_detached`) when it loads, else through
 * `node:crypto`. Every service checks each event of its partitions once (about 120 checks per W1
 * Run over the seven services), and `node:crypto`'s one-shot `verify` (OpenSSL 3) costs 110-125 µs
 * of CPU each on the 2-core machine against libsodium's 50-56 (`node
 * libs/eventlog/scripts/signing-cost.mjs`, docs/performance.md). Both check the same RFC 8032
 * signatures of the keys the deployment holds: a signature either accepts, the other accepts.
 * Signing stays with `node:crypto` (once per append, not once per reader).
 */
import { verify, type KeyObject } from 'node:crypto';
import { createRequire } from 'node:module';

/** The one libsodium function used. */
interface Sodium {
  crypto_sign_verify_detached(signature: Buffer, message: Buffer, publicKey: Buffer): boolean;
}

/** libsodium through sodium-native, or null when it cannot be loaded (a platform without its prebuilt addon). */
function loadSodium(): Sodium | null {
  try {
    const sodium = createRequire(import.meta.url)('sodium-native') as Sodium;
    return typeof sodium.crypto_sign_verify_detached === 'function' ? sodium : null;
  } catch {
    return null;
  }
}

const sodium = loadSodium();

/** What checks signatures in this process: `libsodium` (sodium-native) or `node:crypto` (its fallback). */
export const ed25519Backend: 'libsodium' | 'node:crypto' = sodium ? 'libsodium' : 'node:crypto';

/** Ed25519 signature length, bytes (RFC 8032). */
const SIGNATURE_BYTES = 64;

/** The raw 32 public key bytes of each key checked with, kept per KeyObject. */
const rawKeys = new WeakMap<KeyObject, Buffer>();

function rawKeyOf(key: KeyObject): Buffer {
  let raw = rawKeys.get(key);
  if (!raw) {
    const der = key.export({ format: 'der', type: 'spki' });
    raw = der.subarray(der.length - 32);
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
