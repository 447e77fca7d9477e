// The CPU cost of event signatures (libs/eventlog signing.ts), per event: one sign (an append),
// one full check (a delivery: SHA-256 of the payload and an Ed25519 verify) and one remembered
// check (a later read of a verified message), and the Ed25519 check alone through libsodium (what the
// readers use) and through node:crypto (their fallback), in CPU time. Run after `npm run build`:
//   node libs/eventlog/scripts/signing-cost.mjs [payload bytes, default 2000] [iterations, default 5000]
import { generateKeyPairSync, verify } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ed25519Backend,
  parsePublicKeySet,
  readSigningKey,
  signatureHeaders,
  SignatureVerifier,
  signedBytes,
  verifyEd25519,
} from '@runplane/eventlog';

const bytes = Number(process.argv[2] ?? 2000);
const n = Number(process.argv[3] ?? 5000);
const dir = mkdtempSync(join(tmpdir(), 'rp-signing-cost-'));
const { publicKey, privateKey } = generateKeyPairSync('ed25519');
writeFileSync(join(dir, 'k.pem'), privateKey.export({ format: 'pem', type: 'pkcs8' }));
const signer = readSigningKey('runtime', join(dir, 'k.pem'));
rmSync(dir, { recursive: true, force: true });
const keys = parsePublicKeySet(JSON.stringify({ runtime: [publicKey.export({ format: 'pem', type: 'spki' }).toString()] }));
const event = { eventId: '6f1c3a52-8f0e-5d1b-9a4e-3c2b1a0f9e8d', type: 'model.turn.requested' };
const subject = 'rp.run.0b9e4c1e-7d2a-4f53-9c61-2e8f7a6b5c4d.runtime.3';
const payload = Buffer.from(JSON.stringify({ pad: 'x'.repeat(Math.max(0, bytes - 10)) }));
const headersOf = () => {
  const h = new Map(signatureHeaders(signer, subject, event.eventId, payload));
  return { get: (name) => h.get(name) ?? '' };
};
const time = (what, fn) => {
  for (let i = 0; i < 200; i++) fn(i); // warm-up
  // CPU time of this process (user + system), less sensitive than wall time to other processes on the machine
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) fn(i);
  const cpu = process.cpuUsage(c0);
  const cpuUs = (cpu.user + cpu.system) / n;
  const wallUs = Number(process.hrtime.bigint() - t0) / 1000 / n;
  process.stdout.write(`${what}: ${cpuUs.toFixed(1)} µs CPU per event (${wallUs.toFixed(1)} µs wall; ${n} events of ${payload.length} bytes)\n`);
};
const headers = headersOf();
process.stdout.write(`signatures checked through ${ed25519Backend}\n`);
time('sign (one append)', () => signatureHeaders(signer, subject, event.eventId, payload));
// a new verifier per message (a new sequence number each time): nothing remembered, every check verifies
let fresh = new SignatureVerifier(keys);
time('verify (one delivery)', (i) => {
  if (fresh.check(i + 1, subject, event, payload, headers) !== null) throw new Error('refused');
  if (i % 1000 === 999) fresh = new SignatureVerifier(keys);
});
const remembered = new SignatureVerifier(keys);
remembered.check(1, subject, event, payload, headers);
time('check again (a later read of a verified message)', () => remembered.check(1, subject, event, payload, headers));
// the Ed25519 check alone, through what the readers use and through node:crypto (their fallback), on the same bytes
const signed = signedBytes(subject, event.eventId, payload);
const signature = Buffer.from(headers.get('Runplane-Signature'), 'base64');
time(`Ed25519 check alone (${ed25519Backend})`, () => {
  if (!verifyEd25519(publicKey, signed, signature)) throw new Error('refused');
});
time('Ed25519 check alone (node:crypto, the fallback)', () => {
  if (!verify(null, signed, publicKey, signature)) throw new Error('refused');
});
