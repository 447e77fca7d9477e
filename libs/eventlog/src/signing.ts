/**
 * Per-service event signatures: every append carries the Ed25519 signature of the owner that
 * wrote it, and readers check it against the deployment's public keys. The broker's permissions
 * (bus.ts) already keep a service to its own subjects; a signature also says which owner's key
 * wrote a message, so a stolen NATS password (or a NATS admin) alone cannot write a fact that a
 * reader takes as the owner's (docs/guarantees.md). Signing and key handling are node:crypto's;
 * the readers' checks go through libsodium when it loads (ed25519.ts).
 *
 * Headers of a signed message:
 * - `Runplane-Signer`: the owner whose key signed (`admission`, `runtime`, ...);
 * - `Runplane-Key-Id`: the first 16 hex digits of the SHA-256 of the raw 32-byte public key (so
 *   keys rotate: a reader holds several per owner);
 * - `Runplane-Signature`: base64 Ed25519 signature over {@link signedBytes} (the subject, the
 *   event id and the SHA-256 of the payload bytes).
 */
import { createHash, createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { EventCatalog, Owner, type RunEvent } from '@runplane/contracts';
import { rawPublicKey, verifyEd25519 } from './ed25519.js';

export const SIGNER_HEADER = 'Runplane-Signer';
export const KEY_ID_HEADER = 'Runplane-Key-Id';
export const SIGNATURE_HEADER = 'Runplane-Signature';
/** The signature headers, in the order they are documented. */
export const SIGNATURE_HEADERS = [SIGNER_HEADER, KEY_ID_HEADER, SIGNATURE_HEADER] as const;

/** DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): followed by the 32 raw key bytes. */
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const DOMAIN = 'runplane-event-signature-v1';

/** The key id of a public key: the first 16 hex digits of the SHA-256 of its raw 32 bytes. */
export function keyIdOf(key: KeyObject): string {
  return createHash('sha256').update(rawPublicKey(key)).digest('hex').slice(0, 16);
}

/**
 * The bytes an event's signature covers: a domain tag, the subject (Run, subject owner, partition),
 * the event id (`Nats-Msg-Id`) and the SHA-256 of the payload, one per line. Moving a signed payload
 * to another subject, giving it another id, or changing one byte of it breaks the signature.
 */
export function signedBytes(subject: string, eventId: string, payload: Uint8Array | string): Buffer {
  const digest = createHash('sha256').update(payload).digest('hex');
  return Buffer.from(`${DOMAIN}\n${subject}\n${eventId}\n${digest}`, 'utf8');
}

/** One owner's signing key. */
export interface EventSigner {
  owner: Owner;
  keyId: string;
  key: KeyObject;
}

/**
 * Reads an Ed25519 private key (PKCS#8 PEM) from `file` for `owner`.
 * @param setting the setting that named the file, for the error (`RUNPLANE_SIGNING_KEY_FILE`).
 * @throws Error naming the setting and the file when it cannot be read or holds no Ed25519 private key.
 */
export function readSigningKey(owner: Owner, file: string, setting = 'RUNPLANE_SIGNING_KEY_FILE'): EventSigner {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`${setting}=${file}: cannot read the event signing key (${(e as Error).message})`, { cause: e });
  }
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: text, format: 'pem' });
  } catch (e) {
    throw new Error(`${setting}=${file}: not a PEM private key (PKCS#8, -----BEGIN PRIVATE KEY-----): ${(e as Error).message}`, { cause: e });
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`${setting}=${file}: an ${key.asymmetricKeyType} key, not Ed25519`);
  return { owner, keyId: keyIdOf(key), key };
}

/**
 * The three signature headers of one message: `owner`'s signature over {@link signedBytes}.
 * Deterministic (Ed25519): a retry of the same append sends the same bytes and headers.
 */
export function signatureHeaders(signer: EventSigner, subject: string, eventId: string, payload: Uint8Array | string): [string, string][] {
  const signature = sign(null, signedBytes(subject, eventId, payload), signer.key).toString('base64');
  return [
    [SIGNER_HEADER, signer.owner],
    [KEY_ID_HEADER, signer.keyId],
    [SIGNATURE_HEADER, signature],
  ];
}

/** Why a message's signature is refused. */
export type SignatureProblem =
  /** No signature headers (written around the log, or by a writer without a key). */
  | 'unsigned-event'
  /** Headers present but the signature does not verify with the named key, or the key is unknown for the signer. */
  | 'bad-signature'
  /** A valid signature of an owner who may not write this event type. */
  | 'wrong-signer';

/** Public keys per owner, parsed from the deployment's public key set. */
export type PublicKeySet = ReadonlyMap<Owner, ReadonlyMap<string, KeyObject>>;

/** Parses one public key: an SPKI PEM, or the raw 32 bytes in base64. @throws Error when it is neither an Ed25519 key. */
function publicKeyFrom(text: string): KeyObject {
  const trimmed = text.trim();
  const key = trimmed.startsWith('-----BEGIN')
    ? createPublicKey({ key: trimmed, format: 'pem' })
    : (() => {
        const raw = Buffer.from(trimmed, 'base64');
        if (raw.length !== 32) throw new Error(`raw base64 key of ${raw.length} bytes, not 32`);
        return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
      })();
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`an ${key.asymmetricKeyType} key, not Ed25519`);
  return key;
}

/**
 * Parses a public key set: JSON `{ "<owner>": ["<SPKI PEM or raw base64>", ...] }`, several keys
 * per owner while a key rotates.
 * @param source where the text came from, for the error (e.g. `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE=/etc/...`).
 * @throws Error naming `source` on bad JSON, an unknown owner or a key that is not Ed25519.
 */
export function parsePublicKeySet(text: string, source = 'public key set'): PublicKeySet {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`${source}: not JSON (${(e as Error).message})`, { cause: e });
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`${source}: not an object { "<owner>": ["<key>", ...] }`);
  const set = new Map<Owner, Map<string, KeyObject>>();
  for (const [name, keys] of Object.entries(raw as Record<string, unknown>)) {
    const owner = Owner.safeParse(name);
    if (!owner.success) throw new Error(`${source}: "${name}" is not an owner (${Owner.options.join(', ')})`);
    const list: unknown = typeof keys === 'string' ? [keys] : keys;
    if (!Array.isArray(list) || list.some((k: unknown) => typeof k !== 'string')) throw new Error(`${source}: ${name}: not a list of keys`);
    const byId = new Map<string, KeyObject>();
    for (const [i, k] of (list as string[]).entries()) {
      let key: KeyObject;
      try {
        key = publicKeyFrom(k);
      } catch (e) {
        throw new Error(`${source}: ${name}[${i}]: not an Ed25519 public key (SPKI PEM or raw base64): ${(e as Error).message}`, { cause: e });
      }
      byId.set(keyIdOf(key), key);
    }
    set.set(owner.data, byId);
  }
  return set;
}

/**
 * Reads a public key set file ({@link parsePublicKeySet}).
 * @throws Error naming `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE` and the file when it cannot be read or parsed.
 */
export function readPublicKeySet(file: string, setting = 'RUNPLANE_SIGNING_PUBLIC_KEYS_FILE'): PublicKeySet {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`${setting}=${file}: cannot read the event signing public keys (${(e as Error).message})`, { cause: e });
  }
  return parsePublicKeySet(text, `${setting}=${file}`);
}

/** The headers a signature check reads. */
export interface SignedHeaders {
  get(name: string): string;
}

/** Most verified messages a {@link SignatureVerifier} remembers (each is checked once per process). */
const VERIFIED_MAX = 20_000;

/**
 * Checks the signature of stored messages against a {@link PublicKeySet}: the signer's key (by
 * its id) verifies the signature over {@link signedBytes}, and the signer is the owner the event
 * catalogue names for the event's type (contracts `EventCatalog`: the owner table the broker's
 * permissions come from). A stream message never changes (the stream denies delete and purge), so
 * a message found good is remembered by its subject and sequence and not verified again: a
 * delivery verifies once, the reads of the same message after it cost a lookup.
 */
export class SignatureVerifier {
  private readonly verified = new Set<string>();
  /** Ed25519 verifications done (each about 50-60 µs of CPU through libsodium, about twice that through node:crypto: ed25519.ts): the figure the own-append rule ({@link trustOwn}) lowers. */
  verifications = 0;
  /**
   * @param requiredFromSeq the first stream sequence that must be signed (`RUNPLANE_SIGNING_REQUIRED_FROM_SEQ`,
   *   default 1): an unsigned message below it was stored before signing was switched on and passes.
   */
  constructor(
    readonly keys: PublicKeySet,
    readonly requiredFromSeq = 1,
  ) {}

  /** Number of public keys held (every owner's). */
  get keyCount(): number {
    let n = 0;
    for (const m of this.keys.values()) n += m.size;
    return n;
  }

  /**
   * Why the message's signature is refused, or null when it is good.
   * @param event the decoded event (its type names the owner allowed to sign it).
   */
  check(
    seq: number,
    subject: string,
    event: Pick<RunEvent, 'eventId' | 'type' | 'owner'>,
    data: Uint8Array,
    headers: SignedHeaders | undefined,
  ): { problem: SignatureProblem; reason: string } | null {
    const memo = `${seq} ${subject}`;
    if (this.verified.has(memo)) return null;
    const signer = headers?.get(SIGNER_HEADER) ?? '';
    const keyId = headers?.get(KEY_ID_HEADER) ?? '';
    const signature = headers?.get(SIGNATURE_HEADER) ?? '';
    if (!signer && !keyId && !signature) {
      if (seq < this.requiredFromSeq) return null;
      return { problem: 'unsigned-event', reason: 'it carries no signature (Runplane-Signature)' };
    }
    // a type newer than this catalogue (read by a downstream consumer) is its envelope's owner's to write
    const owner = (EventCatalog[event.type] as (typeof EventCatalog)[keyof typeof EventCatalog] | undefined)?.owner ?? event.owner;
    const keys = this.keys.get(signer as Owner);
    const key = keys?.get(keyId);
    if (!key)
      return { problem: 'bad-signature', reason: `signer ${JSON.stringify(signer)} has no public key ${JSON.stringify(keyId)} in the key set` };
    this.verifications++;
    if (!verifyEd25519(key, signedBytes(subject, event.eventId, data), Buffer.from(signature, 'base64'))) {
      return { problem: 'bad-signature', reason: `the signature of ${signer} (key ${keyId}) does not verify over its subject, event id and payload` };
    }
    if (signer !== owner) return { problem: 'wrong-signer', reason: `signed by ${signer}, but ${event.type} is ${owner}'s to write` };
    this.remember(memo);
    return null;
  }

  /**
   * Takes the message this process itself stored at `seq` on `subject` as verified: the log
   * signed it with the owner's key it holds, and JetStream's acknowledgement (not a duplicate)
   * says those bytes are what the stream holds at that sequence (a stream message never changes).
   * Its delivery back to this process then costs a lookup, not an Ed25519 verify (each service
   * reads its own appends from its consumers: about one delivery in six of a W1 Run).
   * Only for a signed append: an unsigned one is still refused when read (`unsigned-event`).
   */
  trustOwn(seq: number, subject: string): void {
    this.remember(`${seq} ${subject}`);
  }

  private remember(memo: string): void {
    if (this.verified.size >= VERIFIED_MAX) this.verified.delete(this.verified.values().next().value!);
    this.verified.add(memo);
  }
}
