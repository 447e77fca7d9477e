/**
 * TLS for a local stack's nats-server (`runplane up`, the demo, the end-to-end tests, the bench):
 * a private CA made here and a server certificate it signs for the loopback names, so the
 * services verify the server (`NATS_CA_FILE`) as they do in a deployment, where the certificates
 * come from Secrets (deploy/k8s/examples/nats-tls-cert-manager.yaml). Made fresh on every start,
 * never stored in the repository; the CA's private key is not kept.
 */
import { webcrypto } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * @peculiar/x509, loaded on the first certificate made: it is the heaviest module of this package,
 * and what reads a configuration (natsTlsConfig, the test suite's servers) needs none of it. Its
 * dependency injection (tsyringe) needs the Reflect metadata polyfill loaded first.
 */
async function loadX509(): Promise<typeof import('@peculiar/x509')> {
  await import('reflect-metadata');
  return import('@peculiar/x509');
}

/** The files a TLS-enabled local nats-server and its clients use. */
export interface DevNatsTls {
  /** PEM of the private CA: the clients' `NATS_CA_FILE`. */
  caFile: string;
  /** PEM of the server certificate (signed by the CA; 127.0.0.1, ::1, localhost). */
  certFile: string;
  /** PEM (PKCS#8) of the server's private key, mode 0600. */
  keyFile: string;
}

/** The names the server certificate holds: what a local stack's `NATS_URL` can name. */
export const DEV_NATS_TLS_NAMES: readonly { type: 'ip' | 'dns'; value: string }[] = [
  { type: 'ip', value: '127.0.0.1' },
  { type: 'ip', value: '::1' },
  { type: 'dns', value: 'localhost' },
];

const EC = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGN = { name: 'ECDSA', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 3600 * 1000;

/**
 * Makes a private CA (ECDSA P-256, valid `days`, default 30) and a server certificate signed by
 * it for {@link DEV_NATS_TLS_NAMES}, and writes `ca.pem`, `server-cert.pem` and `server-key.pem`
 * (0600) into `dir` (created), replacing earlier ones.
 */
export async function createDevNatsTls(dir: string, opts: { days?: number } = {}): Promise<DevNatsTls> {
  const x509 = await loadX509();
  const crypto = webcrypto;
  // Node's webcrypto is the WebCrypto the library expects (its DOM type is not in this build's lib)
  x509.cryptoProvider.set(crypto as never);
  mkdirSync(dir, { recursive: true });
  const notBefore = new Date(Date.now() - 60_000); // a little clock skew between processes
  const notAfter = new Date(Date.now() + (opts.days ?? 30) * DAY_MS);
  const caKeys = await crypto.subtle.generateKey(EC, false, ['sign', 'verify']);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=Runplane development NATS CA',
    keys: caKeys,
    signingAlgorithm: SIGN,
    notBefore,
    notAfter,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const serverKeys = await crypto.subtle.generateKey(EC, true, ['sign', 'verify']);
  const server = await x509.X509CertificateGenerator.create({
    subject: 'CN=localhost',
    issuer: ca.subject,
    publicKey: serverKeys.publicKey,
    signingKey: caKeys.privateKey,
    signingAlgorithm: SIGN,
    notBefore,
    notAfter,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(DEV_NATS_TLS_NAMES.map((n) => ({ type: n.type, value: n.value }))),
      await x509.AuthorityKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const key = x509.PemConverter.encode(await crypto.subtle.exportKey('pkcs8', serverKeys.privateKey), 'PRIVATE KEY');
  const files: DevNatsTls = { caFile: join(dir, 'ca.pem'), certFile: join(dir, 'server-cert.pem'), keyFile: join(dir, 'server-key.pem') };
  writeFileSync(files.caFile, `${ca.toString('pem')}\n`);
  writeFileSync(files.certFile, `${server.toString('pem')}\n`);
  writeFileSync(files.keyFile, `${key}\n`, { mode: 0o600 });
  return files;
}

/**
 * The nats-server configuration block that makes the server require TLS on its client port with
 * these files (`tls { cert_file, key_file }`; no client certificates: clients authenticate with
 * their user and password, over the encrypted connection).
 */
export function natsTlsConfig(tls: Pick<DevNatsTls, 'certFile' | 'keyFile'>): string {
  return ['tls {', `  cert_file: ${JSON.stringify(tls.certFile)}`, `  key_file: ${JSON.stringify(tls.keyFile)}`, '  timeout: 5', '}', ''].join('\n');
}
