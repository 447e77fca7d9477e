import type { KvEntry } from '@nats-io/kv';
import type { z } from 'zod';

/**
 * The value of a KV bucket entry as `schema` reads it (JSON, zod-checked): null for a deleted or
 * purged key, a value that is not JSON, or one the schema refuses. The one parse of every
 * Runplane KV store (leases, heartbeats, deadlines), so a stray or forged entry is ignored, never thrown.
 */
export function kvJson<S extends z.ZodType>(entry: KvEntry, schema: S): z.infer<S> | null {
  if (entry.operation !== 'PUT') return null;
  let raw: unknown;
  try {
    raw = entry.json();
  } catch {
    return null;
  }
  const value = schema.safeParse(raw);
  return value.success ? value.data : null;
}
