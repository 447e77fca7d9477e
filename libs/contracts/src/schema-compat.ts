/**
 * The evolution rule of the event contract, as a check (docs/contract/README.md): the current
 * JSON Schema may change the last released one only additively. Every definition (event type) of
 * the released document still exists, and in each, no property is removed, none becomes required
 * (a new required property included), no type changes and no enum (or const) value is removed,
 * nor a variant of a union. New optional properties, new enum values and new definitions are
 * additive. Pure: two parsed documents in, the breaks out.
 */
import type { JsonSchema } from './event-schema.js';

/** How a change breaks the released contract. */
export type CompatBreakKind = 'definition-removed' | 'property-removed' | 'newly-required' | 'type-changed' | 'value-removed' | 'variant-removed';

/** One incompatible change. */
export interface CompatBreak {
  /** The `$defs` entry (event type, or `Envelope`) it is in. */
  definition: string;
  /** Where in the definition: property names joined by `.`, `[]` for array items, `<variant>` for a union member; '' for the definition itself. */
  path: string;
  kind: CompatBreakKind;
  /** What changed, for a person. */
  detail: string;
}

/** One line for a person: `run.settled data.outcome: value-removed (...)`. */
export function describeBreak(b: CompatBreak): string {
  return `${b.definition}${b.path ? ` ${b.path}` : ''}: ${b.kind} (${b.detail})`;
}

const isObject = (v: unknown): v is JsonSchema => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Resolves a local `$ref` (`#/...` JSON pointer into its own document); a schema without one as it is. */
function deref(schema: JsonSchema, root: JsonSchema, depth = 0): JsonSchema {
  const ref = schema.$ref;
  if (typeof ref !== 'string') return schema;
  if (!ref.startsWith('#') || depth > 32) throw new Error(`cannot resolve $ref ${ref}: only local references are supported`);
  let node: unknown = root;
  for (const token of ref.slice(1).split('/').filter(Boolean)) {
    const key = decodeURIComponent(token).replace(/~1/g, '/').replace(/~0/g, '~');
    node = isObject(node) ? node[key] : undefined;
  }
  if (!isObject(node)) throw new Error(`cannot resolve $ref ${ref}`);
  return deref(node, root, depth + 1);
}

const jsonTypeOf = (v: unknown): string =>
  v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;

const variantsOf = (s: JsonSchema): JsonSchema[] | undefined => {
  const list = s.anyOf ?? s.oneOf;
  return Array.isArray(list) ? list.filter(isObject) : undefined;
};

/** The JSON types a schema admits, or undefined when it does not restrict them. */
function typesOf(s: JsonSchema, root: JsonSchema): string[] | undefined {
  if (typeof s.type === 'string') return [s.type];
  if (Array.isArray(s.type)) return [...(s.type as string[])].sort();
  const variants = variantsOf(s);
  if (variants) {
    const all = new Set<string>();
    for (const v of variants) {
      const t = typesOf(deref(v, root), root);
      if (!t) return undefined;
      t.forEach((x) => all.add(x));
    }
    return [...all].sort();
  }
  if ('const' in s) return [jsonTypeOf(s.const)];
  if (Array.isArray(s.enum)) return [...new Set(s.enum.map(jsonTypeOf))].sort();
  return undefined;
}

/** The values a schema admits when it lists them (`const` or `enum`), else undefined. */
const valuesOf = (s: JsonSchema): unknown[] | undefined => ('const' in s ? [s.const] : Array.isArray(s.enum) ? s.enum : undefined);

/** A union member's identity across versions: its types and the constant properties that discriminate it. */
function signatureOf(s: JsonSchema, root: JsonSchema): string {
  const types = typesOf(s, root)?.join('|') ?? 'any';
  const props = isObject(s.properties) ? s.properties : {};
  const consts = Object.entries(props)
    .map(([k, v]) => [k, isObject(v) ? deref(v, root) : {}] as const)
    .filter(([, v]) => 'const' in v)
    .map(([k, v]) => `${k}=${JSON.stringify(v.const)}`)
    .sort();
  return consts.length ? `${types}{${consts.join(',')}}` : types;
}

const join = (path: string, key: string) => (path ? `${path}.${key}` : key);

interface Walk {
  definition: string;
  released: JsonSchema;
  current: JsonSchema;
  out: CompatBreak[];
}

function compare(w: Walk, releasedNode: JsonSchema, currentNode: JsonSchema, path: string): void {
  const r = deref(releasedNode, w.released);
  const c = deref(currentNode, w.current);
  const report = (kind: CompatBreakKind, detail: string, at = path) => w.out.push({ definition: w.definition, path: at, kind, detail });

  const rt = typesOf(r, w.released);
  const ct = typesOf(c, w.current);
  if (rt?.join('|') !== ct?.join('|')) {
    report('type-changed', `${rt?.join('|') ?? 'any'} -> ${ct?.join('|') ?? 'any'}`);
    return;
  }

  const rv = valuesOf(r);
  const cv = valuesOf(c);
  if (rv && cv) {
    const kept = new Set(cv.map((v) => JSON.stringify(v)));
    for (const v of rv) if (!kept.has(JSON.stringify(v))) report('value-removed', `${JSON.stringify(v)} no longer allowed`);
  }

  const rp = isObject(r.properties) ? r.properties : {};
  const cp = isObject(c.properties) ? c.properties : {};
  for (const [key, schema] of Object.entries(rp)) {
    if (!(key in cp)) report('property-removed', `${key} removed`, join(path, key));
    else if (isObject(schema) && isObject(cp[key])) compare(w, schema, cp[key], join(path, key));
  }
  const wasRequired = new Set(Array.isArray(r.required) ? (r.required as string[]) : []);
  for (const key of Array.isArray(c.required) ? (c.required as string[]) : []) {
    if (!wasRequired.has(key))
      report('newly-required', key in rp ? `${key} was optional, now required` : `${key} is new and required`, join(path, key));
  }

  if (isObject(r.items) && isObject(c.items)) compare(w, r.items, c.items, `${path}[]`);
  if (isObject(r.additionalProperties) && isObject(c.additionalProperties)) compare(w, r.additionalProperties, c.additionalProperties, `${path}{}`);

  const rvs = variantsOf(r);
  if (rvs) {
    const cvs = variantsOf(c) ?? [c];
    const bySignature = new Map(cvs.map((v) => [signatureOf(deref(v, w.current), w.current), v] as const));
    for (const v of rvs) {
      const signature = signatureOf(deref(v, w.released), w.released);
      const match = bySignature.get(signature);
      if (match) compare(w, v, match, `${path}<${signature}>`);
      else report('variant-removed', `union member ${signature} removed`);
    }
  }
}

/**
 * The incompatible changes from the `released` contract to the `current` one (both parsed JSON
 * Schema documents with `$defs`, as docs/contract/events.schema.json): an empty list when the
 * change is additive only.
 * @throws Error when a `$ref` cannot be resolved (only local `#/...` references are).
 */
export function compatibilityBreaks(released: JsonSchema, current: JsonSchema): CompatBreak[] {
  const out: CompatBreak[] = [];
  const rd = isObject(released.$defs) ? released.$defs : {};
  const cd = isObject(current.$defs) ? current.$defs : {};
  for (const [definition, schema] of Object.entries(rd)) {
    if (!isObject(schema)) continue;
    const now = cd[definition];
    if (!isObject(now)) {
      out.push({ definition, path: '', kind: 'definition-removed', detail: `${definition} is gone` });
      continue;
    }
    compare({ definition, released, current, out }, schema, now, '');
  }
  return out;
}
