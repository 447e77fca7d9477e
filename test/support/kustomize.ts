/**
 * A small kustomize for the tests: renders deploy/k8s/overlays/* (and the base) the way
 * `kubectl kustomize` does, for the fields this repository's kustomizations use and nothing more,
 * so that the manifests can be validated without a kustomize binary (none is installable from
 * npm or Debian). A kustomization that uses any other field is refused with its name: a field
 * this renderer would silently ignore could otherwise make the checks pass on what kustomize
 * renders differently. Where `kubectl` is on the machine, test/deploy/manifests.test.ts compares
 * this output with `kubectl kustomize`.
 *
 * Supported: `resources` (files and directories), `components` (kind Component), `namespace`,
 * `labels` (`pairs`, `includeTemplates`; not `includeSelectors: true`), `images` (`name`,
 * `newName`, `newTag`), `configMapGenerator` and `secretGenerator` (`envs`, `literals`, `files` as `key=path` or `path`,
 * `behavior: create | merge`, `options.disableNameSuffixHash`). Generated names carry no content
 * hash here (kustomize appends `-<10 characters>` unless disabled, and rewrites the references).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parse } from 'yaml';
import { parseEnvFile, parseManifests } from './deploy-manifests.js';

/** A rendered Kubernetes object (plain JSON). */
export type KObject = {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
};

/** The kustomization fields {@link kustomize} implements. */
export const SUPPORTED_FIELDS = [
  'apiVersion',
  'kind',
  'namespace',
  'labels',
  'resources',
  'components',
  'configMapGenerator',
  'secretGenerator',
  'images',
];

interface Generator {
  name: string;
  behavior?: 'create' | 'merge' | 'replace';
  envs?: string[];
  literals?: string[];
  files?: string[];
  options?: { disableNameSuffixHash?: boolean };
}

interface Kustomization {
  kind?: string;
  namespace?: string;
  labels?: { pairs: Record<string, string>; includeSelectors?: boolean; includeTemplates?: boolean }[];
  resources?: string[];
  components?: string[];
  configMapGenerator?: Generator[];
  secretGenerator?: Generator[];
  images?: { name: string; newName?: string; newTag?: string }[];
}

/** Kinds that are not namespaced, among those a Runplane kustomization may hold. */
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'StorageClass', 'PersistentVolume']);

/** Kinds whose pod template is `spec.template`. */
const TEMPLATED = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job']);

function readKustomization(dir: string): Kustomization {
  const file = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'].map((f) => join(dir, f)).find((f) => existsSync(f));
  if (!file) throw new Error(`${dir}: no kustomization.yaml`);
  const k = parse(readFileSync(file, 'utf8')) as Kustomization;
  const unknown = Object.keys(k).filter((f) => !SUPPORTED_FIELDS.includes(f));
  if (unknown.length)
    throw new Error(`${file}: fields the test renderer does not implement: ${unknown.join(', ')} (extend test/support/kustomize.ts)`);
  for (const l of k.labels ?? [])
    if (l.includeSelectors) throw new Error(`${file}: labels.includeSelectors true is not implemented by the test renderer`);
  return k;
}

/** The pod templates of an object (a Deployment's or a Job's `spec.template`), none for other kinds. */
export function podTemplatesOf(o: KObject): { metadata?: { labels?: Record<string, string> }; spec?: Record<string, unknown> }[] {
  if (!o.kind || !TEMPLATED.has(o.kind)) return [];
  const spec = (o.spec ?? {}) as { template?: { metadata?: { labels?: Record<string, string> }; spec?: Record<string, unknown> } };
  return spec.template ? [spec.template] : [];
}

/** `KEY=value` literals of a generator, as kustomize splits them (at the first `=`). */
function literalsOf(literals: string[] = []): Record<string, string> {
  const out: Record<string, string> = {};
  for (const l of literals) {
    const eq = l.indexOf('=');
    if (eq <= 0) throw new Error(`bad generator literal ${JSON.stringify(l)} (want KEY=value)`);
    out[l.slice(0, eq)] = l.slice(eq + 1);
  }
  return out;
}

function generate(dir: string, kind: 'ConfigMap' | 'Secret', generators: Generator[], objects: KObject[]): void {
  for (const g of generators) {
    const data: Record<string, string> = {};
    for (const env of g.envs ?? []) Object.assign(data, parseEnvFile(readFileSync(join(dir, env), 'utf8')));
    Object.assign(data, literalsOf(g.literals));
    // `key=path` or `path` (the key is then the file's name), the file's content as the value
    for (const f of g.files ?? []) {
      const at = f.indexOf('=');
      const path = at < 0 ? f : f.slice(at + 1);
      data[at < 0 ? (path.split('/').pop() ?? path) : f.slice(0, at)] = readFileSync(join(dir, path), 'utf8');
    }
    const encoded = kind === 'Secret' ? Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])) : data;
    const behavior = g.behavior ?? 'create';
    const existing = objects.find((o) => o.kind === kind && o.metadata?.name === g.name);
    if (behavior === 'create') {
      if (existing) throw new Error(`${dir}: ${kind} ${g.name} already exists (behavior create)`);
      objects.push({ apiVersion: 'v1', kind, metadata: { name: g.name }, ...(kind === 'Secret' ? { type: 'Opaque' } : {}), data: encoded });
    } else {
      if (!existing) throw new Error(`${dir}: ${kind} ${g.name} to ${behavior} does not exist`);
      existing.data = behavior === 'merge' ? { ...(existing.data as Record<string, string>), ...encoded } : encoded;
    }
  }
}

function build(dir: string, accumulated: KObject[], expectKind: 'Kustomization' | 'Component'): KObject[] {
  const k = readKustomization(dir);
  const kind = k.kind ?? 'Kustomization';
  if (kind !== expectKind) throw new Error(`${dir}: kind ${kind}, expected ${expectKind}`);
  const objects = accumulated;
  for (const r of k.resources ?? []) {
    const path = resolve(dir, r);
    if (statSync(path).isDirectory()) objects.push(...build(path, [], 'Kustomization'));
    else objects.push(...(parseManifests(path) as KObject[]));
  }
  for (const c of k.components ?? []) build(resolve(dir, c), objects, 'Component');
  generate(dir, 'ConfigMap', k.configMapGenerator ?? [], objects);
  generate(dir, 'Secret', k.secretGenerator ?? [], objects);

  for (const o of objects) {
    if (k.namespace && !CLUSTER_SCOPED.has(o.kind ?? '')) o.metadata = { ...o.metadata, namespace: k.namespace };
    for (const l of k.labels ?? []) {
      o.metadata = { ...o.metadata, labels: { ...o.metadata?.labels, ...l.pairs } };
      if (l.includeTemplates) for (const t of podTemplatesOf(o)) t.metadata = { ...t.metadata, labels: { ...t.metadata?.labels, ...l.pairs } };
    }
    for (const img of k.images ?? [])
      for (const t of podTemplatesOf(o))
        for (const c of [...((t.spec?.containers ?? []) as { image?: string }[]), ...((t.spec?.initContainers ?? []) as { image?: string }[])]) {
          const m = /^(.*?)(?::([^:/@]+))?(@.+)?$/.exec(c.image ?? '');
          if (!m || m[1] !== img.name) continue;
          c.image = `${img.newName ?? img.name}${img.newTag !== undefined ? `:${img.newTag}` : m[2] ? `:${m[2]}` : ''}`;
        }
  }
  return objects;
}

/**
 * Renders the kustomization in `dir` (resources, components, generators, then its namespace,
 * labels and images over everything it accumulated, as kustomize orders them).
 * @throws Error naming the file for a field it does not implement, a missing file, bad YAML, or a
 *   generator that merges into nothing.
 */
export function kustomize(dir: string): KObject[] {
  return build(resolve(dir), [], 'Kustomization');
}
