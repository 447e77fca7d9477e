/**
 * TLS of every NATS connection (the services', the heartbeat worker thread's, the CLI's, the
 * downstream consumer library's): the client verifies the server's certificate against the CA
 * bundle of `NATS_CA_FILE`, so the per-service passwords (bus.ts) never cross the network in
 * clear and a service never talks to a server that is not the deployment's. This module imports
 * only node built-ins, so the heartbeat worker thread can load it.
 */
import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';

/** The `tls` connect option of the NATS client (`@nats-io/nats-core` TlsOptions, the part used here). */
export interface NatsTlsOption {
  /** PEM CA bundle the server's certificate must chain to; re-read on every (re)connection (a rotated Secret is picked up). */
  caFile?: string;
}

/**
 * Checks that `caFile` (`NATS_CA_FILE`) is a readable PEM bundle of at least one X.509
 * certificate, so a wrong path or an empty Secret stops the process at start-up with the
 * setting's name rather than as a TLS failure on some later reconnection.
 * @throws Error naming `NATS_CA_FILE` and the path when the file cannot be read or holds no
 *   valid PEM certificate.
 */
export function checkNatsCaFile(caFile: string): void {
  let text: string;
  try {
    text = readFileSync(caFile, 'utf8');
  } catch (e) {
    throw new Error(`NATS_CA_FILE=${caFile}: cannot read the NATS CA bundle (${(e as Error).message})`, { cause: e });
  }
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error(`NATS_CA_FILE=${caFile}: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file`);
  for (const block of blocks) {
    try {
      new X509Certificate(block);
    } catch (e) {
      throw new Error(`NATS_CA_FILE=${caFile}: not a valid PEM certificate (${(e as Error).message})`, { cause: e });
    }
  }
}

/** True when any server of a `NATS_URL` (one URL or comma-separated) is written `tls://host:port`. */
export function natsUrlRequiresTls(natsUrl: string): boolean {
  return natsUrl
    .split(',')
    .map((s) => s.trim())
    .some((s) => /^tls:\/\//i.test(s));
}

/**
 * The TLS part of the connect options of a NATS connection: with a CA bundle (`NATS_CA_FILE`),
 * `{ tls: { caFile } }`: the client upgrades to TLS, refuses a server that offers none ("server
 * does not support 'tls'") and verifies the server's certificate (chain to the CA, host name or
 * IP address of the URL) before it sends its user and password. With a `tls://` URL and no CA,
 * `{ tls: {} }`: TLS required, verified against the system's CAs. Otherwise nothing: the client
 * takes TLS only when the server requires it, verified against the system's CAs.
 * @throws Error naming `NATS_CA_FILE` as {@link checkNatsCaFile}.
 */
export function natsTlsOptions(natsUrl: string, caFile: string | undefined): { tls: NatsTlsOption } | Record<string, never> {
  if (caFile) {
    checkNatsCaFile(caFile);
    return { tls: { caFile } };
  }
  return natsUrlRequiresTls(natsUrl) ? { tls: {} } : {};
}
