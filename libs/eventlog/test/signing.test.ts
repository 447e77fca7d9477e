/**
 * Per-service event signatures (signing.ts): every append carries its owner's Ed25519 signature
 * over the subject, event id and payload, and a log holding the deployment's public keys refuses
 * a message that is unsigned, tampered with, or signed by an owner who may not write its type.
 * On the real JetStream the product starts.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { generateKeyPairSync, sign as nodeSign, verify as nodeVerify, type KeyObject } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { makeEvent, type Owner } from '@runplane/contracts';
import { errors as natsErrors, headers as natsHeaders } from '@nats-io/transport-node';
import {
  ed25519Backend,
  EventLog,
  EXPECTED_LAST_SUBJECT_SEQUENCE,
  InvalidStoredEvent,
  KEY_ID_HEADER,
  keyIdOf,
  parsePublicKeySet,
  rawPublicKey,
  readSigningKey,
  SIGNATURE_HEADER,
  signatureHeaders,
  SignatureVerifier,
  SIGNER_HEADER,
  runSubject,
  verifyEd25519,
  verifyStored,
} from '@runplane/eventlog';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS, suiteNatsEnv } from '../../../test/support/nats-server.js';
import { admittedEvent, testContext } from '../../../test/support/events.js';
import { repoRoot } from '@runplane/devstack';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');
const dir = mkdtempSync(join(tmpdir(), 'rp-signing-'));

/** A fresh Ed25519 key pair written as `<name>.pem` (PKCS#8). */
function keyPair(name: string): { file: string; publicKey: KeyObject } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const file = join(dir, `${name}.pem`);
  writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
  return { file, publicKey };
}
const spki = (k: KeyObject) => k.export({ format: 'pem', type: 'spki' }).toString();

const admission = keyPair('admission');
const admissionNext = keyPair('admission-next');
const runtime = keyPair('runtime');
const stranger = keyPair('stranger');
/** The public key set: admission with two keys (a rotation under way, one as raw base64), runtime with one. */
const publicKeysFile = join(dir, 'public-keys.json');
writeFileSync(
  publicKeysFile,
  JSON.stringify({
    admission: [spki(admission.publicKey), rawPublicKey(admissionNext.publicKey).toString('base64')],
    runtime: [spki(runtime.publicKey)],
  }),
);

const turn = (runId: string, n: number) => makeEvent('model.turn.requested', testContext(runId), n, { turn: n, model: 'm' }, new Date());

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('signing (pure)', () => {
  it('checks signatures through libsodium here, and accepts and refuses exactly what node:crypto does', () => {
    // the readers' fast path must really be the one running (a fallback would cost twice the CPU)
    expect(ed25519Backend).toBe('libsodium');
    const a = generateKeyPairSync('ed25519');
    const b = generateKeyPairSync('ed25519');
    const message = Buffer.from('runplane-event-signature-v1\nsubject\nevent id\ndigest');
    const good = nodeSign(null, message, a.privateKey);
    const flipped = (buf: Buffer, i: number) => Buffer.from(buf.map((x, j) => (j === i ? x ^ 1 : x)));
    const cases: [string, KeyObject, Buffer, Buffer][] = [
      ['good', a.publicKey, message, good],
      ['another key', b.publicKey, message, good],
      ['a changed message', a.publicKey, flipped(message, 3), good],
      ['a changed R', a.publicKey, message, flipped(good, 5)],
      ['a changed S', a.publicKey, message, flipped(good, 40)],
      ['zeros', a.publicKey, message, Buffer.alloc(64)],
      ['random bytes', a.publicKey, message, randomBytes(64)],
    ];
    for (const [what, key, m, sig] of cases) expect([what, verifyEd25519(key, m, sig)]).toEqual([what, nodeVerify(null, m, key, sig)]);
    expect(verifyEd25519(a.publicKey, message, good)).toBe(true);
    // a signature of the wrong length (a forged header) is refused, not an error
    for (const sig of [Buffer.alloc(0), good.subarray(0, 63), Buffer.concat([good, Buffer.alloc(1)])])
      expect(verifyEd25519(a.publicKey, message, sig)).toBe(false);
  });

  it('given a process where libsodium cannot load, then it checks through node:crypto with the same answers and says why', async () => {
    // the built library (npm run build) in a process whose module resolution refuses sodium-native
    const fallbackDir = mkdtempSync(join(tmpdir(), 'rp-ed25519-fallback-'));
    try {
      // synchronous hooks (node:module registerHooks) see require() as well as import
      writeFileSync(
        join(fallbackDir, 'main.mjs'),
        `import { registerHooks } from 'node:module';
import { generateKeyPairSync, sign } from 'node:crypto';
registerHooks({
  resolve(specifier, context, next) {
    if (specifier === 'sodium-native') throw new Error('sodium-native refused by the test');
    return next(specifier, context);
  },
});
const { ed25519Backend, ed25519Fallback, verifyEd25519 } = await import(${JSON.stringify(pathToFileURL(join(repoRoot(), 'libs/eventlog/dist/ed25519.js')).href)});
const { publicKey, privateKey } = generateKeyPairSync('ed25519');
const m = Buffer.from('m');
const good = sign(null, m, privateKey);
console.log(JSON.stringify({ ed25519Backend, ed25519Fallback, good: verifyEd25519(publicKey, m, good), bad: verifyEd25519(publicKey, Buffer.from('n'), good) }));`,
      );
      const { stdout } = await promisify(execFile)(process.execPath, [join(fallbackDir, 'main.mjs')]);
      expect(JSON.parse(stdout.trim())).toEqual({
        ed25519Backend: 'node:crypto',
        ed25519Fallback: expect.stringContaining('refused by the test'),
        good: true,
        bad: false,
      });
    } finally {
      rmSync(fallbackDir, { recursive: true, force: true });
    }
  });

  it('the key id is the first 16 hex digits of the SHA-256 of the raw public key, the same from the private and the public key', () => {
    const signer = readSigningKey('admission', admission.file);
    expect(signer.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(signer.keyId).toBe(keyIdOf(admission.publicKey));
    const set = parsePublicKeySet(JSON.stringify({ admission: [rawPublicKey(admission.publicKey).toString('base64')] }));
    expect([...set.get('admission')!.keys()]).toEqual([signer.keyId]);
  });

  it('a bad key file or key set fails naming the setting and the file', () => {
    writeFileSync(join(dir, 'not-a-key.pem'), 'hello');
    expect(() => readSigningKey('admission', join(dir, 'not-a-key.pem'))).toThrow(
      /RUNPLANE_SIGNING_KEY_FILE=.*not-a-key\.pem: not a PEM private key/,
    );
    expect(() => readSigningKey('admission', join(dir, 'missing.pem'))).toThrow(/RUNPLANE_SIGNING_KEY_FILE=.*missing\.pem: cannot read/);
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'pem', type: 'pkcs8' });
    writeFileSync(join(dir, 'ec.pem'), ec);
    expect(() => readSigningKey('admission', join(dir, 'ec.pem'))).toThrow(/an ec key, not Ed25519/);
    expect(() => parsePublicKeySet('{"judge": []}', 'RUNPLANE_SIGNING_PUBLIC_KEYS_FILE=x')).toThrow(
      /RUNPLANE_SIGNING_PUBLIC_KEYS_FILE=x: "judge" is not an owner/,
    );
    expect(() => parsePublicKeySet('{"runtime": ["AAAA"]}', 'S')).toThrow(/S: runtime\[0\]: not an Ed25519 public key/);
    expect(() => parsePublicKeySet('nope', 'S')).toThrow(/S: not JSON/);
  });

  it('given a signed message, when its payload, subject or event id is changed, then the signature is refused', () => {
    const verifier = new SignatureVerifier(parsePublicKeySet(JSON.stringify({ admission: [spki(admission.publicKey)] })));
    const signer = readSigningKey('admission', admission.file);
    const event = admittedEvent('run-1');
    const subject = 'rp.run.run-1.admission.3';
    const payload = Buffer.from(JSON.stringify(event));
    const h = new Map(signatureHeaders(signer, subject, event.eventId, payload));
    const get = { get: (n: string) => h.get(n) ?? '' };
    expect(verifier.check(1, subject, event, payload, get)).toBeNull();
    const tampered = Buffer.from(JSON.stringify({ ...event, data: { ...event.data, limits: { ...event.data.limits, maxModelRequests: 99 } } }));
    expect(verifier.check(2, subject, event, tampered, get)).toMatchObject({ problem: 'bad-signature' });
    expect(verifier.check(3, 'rp.run.run-1.admission.4', event, payload, get)).toMatchObject({ problem: 'bad-signature' });
    expect(verifier.check(4, subject, { ...event, eventId: '00000000-0000-5000-8000-000000000000' }, payload, get)).toMatchObject({
      problem: 'bad-signature',
    });
    expect(verifier.check(5, subject, event, payload, { get: () => '' })).toMatchObject({ problem: 'unsigned-event' });
  });

  it('given signatures required from sequence 10 (a log that held events before signing), then an unsigned event below it passes, at or above it is refused, and a signed one below it is still checked', () => {
    const verifier = new SignatureVerifier(parsePublicKeySet(JSON.stringify({ admission: [spki(admission.publicKey)] })), 10);
    const signer = readSigningKey('admission', admission.file);
    const event = admittedEvent('run-2');
    const subject = 'rp.run.run-2.admission.3';
    const payload = Buffer.from(JSON.stringify(event));
    const none = { get: () => '' };
    expect(verifier.check(9, subject, event, payload, none)).toBeNull();
    expect(verifier.check(10, subject, event, payload, none)).toMatchObject({ problem: 'unsigned-event' });
    const h = new Map(signatureHeaders(signer, subject, event.eventId, payload));
    const tampered = Buffer.from(JSON.stringify({ ...event, eventId: 'x' }));
    expect(verifier.check(8, subject, event, tampered, { get: (n: string) => h.get(n) ?? '' })).toMatchObject({ problem: 'bad-signature' });
  });
});

describeEachNatsServer(servers, (server) => {
  const stream = `RPTEST_SIG_${tag}`;
  const prefix = `tsig${tag}`;
  let admissionLog: EventLog;
  let runtimeLog: EventLog;
  /** A reader with the public keys and no signing key (an auditor, a downstream service). */
  let reader: EventLog;
  const refused: InvalidStoredEvent[] = [];

  beforeAll(async () => {
    admissionLog = await EventLog.connect({
      ...SUITE_NATS,
      natsUrl: server.url,
      stream,
      prefix,
      name: 'admission',
      signingKeyFiles: { admission: admission.file },
      publicKeysFile,
      appendRetryMs: 5_000,
    });
    runtimeLog = await EventLog.connect({
      ...SUITE_NATS,
      natsUrl: server.url,
      stream,
      prefix,
      name: 'runtime',
      signingKeyFiles: { runtime: runtime.file },
      publicKeysFile,
      appendRetryMs: 5_000,
      atomicBatches: 'always',
    });
    reader = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream, prefix, name: 'reader', publicKeysFile, create: false });
    reader.onInvalid = (e) => refused.push(e);
  });
  afterAll(async () => {
    await admissionLog.destroyStream();
    for (const log of [admissionLog, runtimeLog, reader]) await log.close();
  });

  const raw = async (seq: number) => (await reader.jsm.direct.getMessage(stream, { seq }))!;

  it('given each owner appends with its own key (single and atomic batch), then every event carries the three headers and reads back verified', async () => {
    const runId = `r1${tag}`;
    const a = await admissionLog.append(admittedEvent(runId), 0);
    const t1 = await runtimeLog.append(turn(runId, 1), 0);
    const batch = await runtimeLog.appendBatch([{ event: turn(runId, 2), expectedLastSubjectSeq: t1.seq }, { event: turn(runId, 3) }]);
    const msgs = await Promise.all([a.seq, t1.seq, ...batch.map((b) => b.seq)].map(raw));
    expect(msgs.map((m) => m.header.get(SIGNER_HEADER))).toEqual(['admission', 'runtime', 'runtime', 'runtime']);
    expect(msgs.map((m) => m.header.get(KEY_ID_HEADER))).toEqual([
      keyIdOf(admission.publicKey),
      ...Array<string>(3).fill(keyIdOf(runtime.publicKey)),
    ]);
    expect(msgs.every((m) => /^[A-Za-z0-9+/]{86}==$/.test(m.header.get(SIGNATURE_HEADER)))).toBe(true);
    const read = await reader.readRun(runId);
    expect(read.map((e) => e.event.type)).toEqual(['run.admitted', 'model.turn.requested', 'model.turn.requested', 'model.turn.requested']);
    expect(refused).toEqual([]);
  });

  it('given a process read back what it appended itself (single and atomic batch), then it verifies none of it again, while another reader verifies each once', async () => {
    const runId = `rown${tag}`;
    await admissionLog.append(admittedEvent(runId), 0);
    const t1 = await runtimeLog.append(turn(runId, 1), 0);
    await runtimeLog.appendBatch([{ event: turn(runId, 2), expectedLastSubjectSeq: t1.seq }, { event: turn(runId, 3) }]);
    const own = runtimeLog.signatures!.verifications;
    const other = reader.signatures!.verifications;
    expect((await runtimeLog.readRun(runId)).map((e) => e.event.type)).toEqual([
      'run.admitted',
      'model.turn.requested',
      'model.turn.requested',
      'model.turn.requested',
    ]);
    // the runtime verifies only admission's event; the reader all four, once each
    expect(runtimeLog.signatures!.verifications - own).toBe(1);
    expect((await reader.readRun(runId)).length).toBe(4);
    await reader.readRun(runId);
    expect(reader.signatures!.verifications - other).toBe(4);
    expect(refused).toEqual([]);
  });

  it('given the acknowledgement of a signed append lost, when it is retried, then the retry sends the same bytes and the stored event still verifies', async () => {
    const runId = `r2${tag}`;
    const js = admissionLog.js;
    const publish = js.publish.bind(js);
    const sent: string[] = [];
    let calls = 0;
    js.publish = async (...args: Parameters<typeof publish>) => {
      const n = ++calls;
      const h = args[2]?.headers;
      sent.push(`${String(args[1])}|${h?.get(SIGNATURE_HEADER)}`);
      const ack = await publish(...args);
      if (n === 1) throw new natsErrors.TimeoutError(); // stored, its acknowledgement lost
      return ack;
    };
    let seq: number;
    try {
      const r = await admissionLog.append(admittedEvent(runId), 0);
      expect(r.recovered).toBe(true);
      seq = r.seq;
    } finally {
      js.publish = publish;
    }
    expect(calls).toBe(2);
    expect(sent[1]).toBe(sent[0]);
    const m = await raw(seq);
    expect(() => verifyStored(m.seq, m.subject, m.data, m.header, reader.space.partitions, reader.signatures)).not.toThrow();
    expect(await reader.readRun(runId)).toHaveLength(1);
  });

  it('given the acknowledgement of a signed atomic batch lost, when it is sent again, then it is recognised as its own and every event still verifies', async () => {
    const runId = `r2b${tag}`;
    await admissionLog.append(admittedEvent(runId), 0);
    const request = runtimeLog.nc.request.bind(runtimeLog.nc);
    const signatures: string[] = [];
    let calls = 0;
    runtimeLog.nc.request = async (...args: Parameters<typeof request>) => {
      // the commits (the reads that recognise the stored batch are requests too)
      const n = args[0].startsWith(`${prefix}.run.`) ? ++calls : 0;
      if (n) signatures.push(args[2]?.headers?.get(SIGNATURE_HEADER) ?? '');
      const reply = await request(...args);
      if (n === 1) throw new natsErrors.TimeoutError(); // stored, its acknowledgement lost
      return reply;
    };
    let results;
    try {
      results = await runtimeLog.appendBatch([{ event: turn(runId, 1), expectedLastSubjectSeq: 0 }, { event: turn(runId, 2) }]);
    } finally {
      runtimeLog.nc.request = request;
    }
    expect(calls).toBe(2);
    expect(signatures[1]).toBe(signatures[0]);
    expect(results.map((r) => r.recovered)).toEqual([true, true]);
    for (const r of results) {
      const m = await raw(r.seq);
      expect(() => verifyStored(m.seq, m.subject, m.data, m.header, reader.space.partitions, reader.signatures)).not.toThrow();
    }
    expect(await reader.readRun(runId)).toHaveLength(3);
  });

  it('given a key rotation (two admission keys published), then events signed with either key are accepted', async () => {
    const runId = `r3${tag}`;
    const next = await EventLog.connect({
      ...SUITE_NATS,
      natsUrl: server.url,
      stream,
      prefix,
      name: 'admission',
      signingKeyFiles: { admission: admissionNext.file },
      publicKeysFile,
    });
    try {
      const stored = await next.append(admittedEvent(runId), 0);
      expect((await raw(stored.seq)).header.get(KEY_ID_HEADER)).toBe(keyIdOf(admissionNext.publicKey));
      expect((await reader.readRun(runId)).map((e) => e.event.type)).toEqual(['run.admitted']);
    } finally {
      await next.close();
    }
  });

  /** Publishes `event` conditionally (as the log does) with the given headers, around the log's signing. */
  const publishWith = async (
    runId: string,
    event: ReturnType<typeof admittedEvent> | ReturnType<typeof turn>,
    owner: Owner,
    set: (h: ReturnType<typeof natsHeaders>, subject: string, body: string) => void,
  ) => {
    const subject = runSubject(reader.space, runId, owner);
    const body = JSON.stringify({ ...event, prevSeq: 0 });
    const h = natsHeaders();
    h.set('Nats-Msg-Id', event.eventId);
    h.set(EXPECTED_LAST_SUBJECT_SEQUENCE, '0');
    set(h, subject, body);
    return (await admissionLog.js.publish(subject, body, { headers: h, expect: { lastSubjectSequence: 0 } })).seq;
  };

  it('given messages with a back-link the server checked but no, a tampered, a wrong-signer or an unknown-key signature, then each is refused with its reason', async () => {
    const admissionSigner = readSigningKey('admission', admission.file);
    const cases: [string, (h: ReturnType<typeof natsHeaders>, subject: string, body: string) => void, Owner, 'admitted' | 'turn', string][] = [
      ['unsigned', () => undefined, 'admission', 'admitted', 'unsigned-event'],
      [
        'tampered',
        (h, subject, body) => {
          const event = JSON.parse(body) as { eventId: string };
          for (const [k, v] of signatureHeaders(admissionSigner, subject, event.eventId, body.replace('hello', 'HELLO'))) h.set(k, v);
        },
        'admission',
        'admitted',
        'bad-signature',
      ],
      [
        // admission's valid signature on a runtime fact: admission may not write model turns
        'wrong-signer',
        (h, subject, body) => {
          for (const [k, v] of signatureHeaders(admissionSigner, subject, (JSON.parse(body) as { eventId: string }).eventId, body)) h.set(k, v);
        },
        'runtime',
        'turn',
        'wrong-signer',
      ],
      [
        'unknown-key',
        (h, subject, body) => {
          const signer = { ...readSigningKey('admission', stranger.file), owner: 'admission' as const };
          for (const [k, v] of signatureHeaders(signer, subject, (JSON.parse(body) as { eventId: string }).eventId, body)) h.set(k, v);
        },
        'admission',
        'admitted',
        'bad-signature',
      ],
    ];
    for (const [name, set, owner, kind, problem] of cases) {
      const runId = `r4${name}${tag}`;
      const event = kind === 'admitted' ? admittedEvent(runId) : turn(runId, 1);
      const seq = await publishWith(runId, event, owner, set);
      const m = await raw(seq);
      // the same message passes every other check: only the signature stands between it and a fact
      expect(() => verifyStored(m.seq, m.subject, m.data, m.header, reader.space.partitions)).not.toThrow();
      let thrown: unknown = null;
      try {
        verifyStored(m.seq, m.subject, m.data, m.header, reader.space.partitions, reader.signatures);
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBeInstanceOf(InvalidStoredEvent);
      expect((thrown as InvalidStoredEvent).anomaly).toBe(problem);
      // every read skips and reports it
      refused.length = 0;
      expect(await reader.readRun(runId)).toEqual([]);
      expect(refused.map((e) => e.anomaly)).toContain(problem);
    }
  });

  it('refuses at start-up a signing key on a process that owns no facts, and public keys without the service’s own key', async () => {
    const env = { ...suiteNatsEnv(server.url), RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: prefix };
    await expect(EventLog.fromEnv('projector', { ...env, RUNPLANE_SIGNING_KEY_FILE: admission.file })).rejects.toThrow(
      /RUNPLANE_SIGNING_KEY_FILE is set for projector, which owns no facts/,
    );
    await expect(EventLog.fromEnv('runtime', { ...env, RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: publicKeysFile })).rejects.toThrow(
      /RUNPLANE_SIGNING_PUBLIC_KEYS_FILE is set but RUNPLANE_SIGNING_KEY_FILE is not/,
    );
    const ok = await EventLog.fromEnv('runtime', {
      ...env,
      RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: publicKeysFile,
      RUNPLANE_SIGNING_KEY_FILE: runtime.file,
    });
    try {
      expect([...ok.signers.keys()]).toEqual(['runtime']);
      expect(ok.signatures?.keyCount).toBe(3);
    } finally {
      await ok.close();
    }
  });

  it('given RUNPLANE_SIGNING_VERIFY=false, a service still signs and checks its own key, but reads an unsigned event as stored; a read-only reader (the audit) refuses it all the same', async () => {
    const runId = `r5unsigned${tag}`;
    await publishWith(runId, admittedEvent(runId), 'admission', () => undefined);
    const env = {
      ...suiteNatsEnv(server.url),
      RUNPLANE_STREAM: stream,
      RUNPLANE_SUBJECT_PREFIX: prefix,
      RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: publicKeysFile,
    };
    const trusting = await EventLog.fromEnv('runtime', { ...env, RUNPLANE_SIGNING_KEY_FILE: runtime.file, RUNPLANE_SIGNING_VERIFY: 'false' });
    const auditor = await EventLog.fromEnv('ops', { ...env, RUNPLANE_SIGNING_VERIFY: 'false' }, { readOnly: true });
    try {
      expect(trusting.signatures).toBeNull();
      expect([...trusting.signers.keys()]).toEqual(['runtime']);
      expect((await trusting.readRun(runId)).map((e) => e.event.type)).toEqual(['run.admitted']);
      auditor.onInvalid = () => undefined;
      expect(await auditor.readRun(runId)).toEqual([]);
    } finally {
      await trusting.close();
      await auditor.close();
    }
    // its own key is still checked against the public keys at start-up
    await expect(
      EventLog.fromEnv('admission', { ...env, RUNPLANE_SIGNING_KEY_FILE: stranger.file, RUNPLANE_SIGNING_VERIFY: 'false' }),
    ).rejects.toThrow(/is not among admission's in RUNPLANE_SIGNING_PUBLIC_KEYS_FILE/);
  });

  it('refuses at start-up a signing key whose public key is not published, naming both settings', async () => {
    await expect(
      EventLog.connect({
        ...SUITE_NATS,
        natsUrl: server.url,
        stream,
        prefix,
        name: 'admission',
        signingKeyFiles: { admission: stranger.file },
        publicKeysFile,
      }),
    ).rejects.toThrow(/RUNPLANE_SIGNING_KEY_FILE=.*stranger\.pem: its public key .* is not among admission's in RUNPLANE_SIGNING_PUBLIC_KEYS_FILE/);
  });
});
