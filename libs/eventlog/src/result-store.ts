import { Objm, type ObjectStore } from '@nats-io/obj';
import { sha256Hex, type ResultRef } from '@runplane/contracts';
import { untilProvisioned } from '@runplane/kit';
import type { EventLog } from './event-log.js';

/**
 * Content-addressed store for large tool results: a JetStream object store bucket
 * `<prefix>_results`, keyed by the sha256 of the JSON. Receipts carry a {@link ResultRef}
 * (bucket, key, digest, size); readers verify the digest.
 */
export class ResultStore {
  private constructor(
    private readonly store: ObjectStore,
    readonly bucket: string,
  ) {}

  /** The bucket name for a log's subject space: `<prefix>_results`. */
  static bucketFor(log: Pick<EventLog, 'space'>): string {
    return `${log.space.prefix}_results`;
  }

  static async open(log: EventLog): Promise<ResultStore> {
    const bucket = ResultStore.bucketFor(log);
    // a missing bucket the tools' user may not create is waited for (the admin's provisioning)
    const store = await untilProvisioned(`bucket ${bucket}`, () => new Objm(log.nc).create(bucket));
    return new ResultStore(store, bucket);
  }

  /** Stores `json` (idempotent: same content, same key) and returns its reference. */
  async put(json: string): Promise<ResultRef> {
    const bytes = Buffer.from(json, 'utf8');
    const sha256 = sha256Hex(bytes);
    const existing = await this.store.info(sha256);
    if (!existing || existing.deleted) await this.store.putBlob({ name: sha256 }, new Uint8Array(bytes));
    return { bucket: this.bucket, key: sha256, sha256, bytes: bytes.length };
  }

  /**
   * Reads a stored result back as parsed JSON.
   * @throws when the object is missing or its digest does not match the reference.
   */
  async get(ref: ResultRef): Promise<unknown> {
    const data = await this.store.getBlob(ref.key);
    if (!data) throw new Error(`result ${ref.key} is missing from ${this.bucket}`);
    const digest = sha256Hex(Buffer.from(data));
    if (digest !== ref.sha256) throw new Error(`result ${ref.key} digest mismatch: ${digest}`);
    return JSON.parse(Buffer.from(data).toString('utf8'));
  }

  /** Deletes the bucket: test clean-up only. */
  async destroy(): Promise<void> {
    await this.store.destroy().catch(() => undefined);
  }
}
