/**
 * The parts of the question the scripted research policy did not answer: their names and short reasons, the fund facts asked and not found, and the closing passage with the `runplane-unanswered` block. Pure.
 */
import { FundMetadataResult, UNANSWERED_FENCE, type UnansweredPart } from '@runplane/contracts';
import { argText, capitalize } from './answer-text.js';
import type { CallRecord } from './conversation.js';
import { APPROXIMATE_REASON } from './file-choice.js';

/** The part of the question a call answers, for the unanswered list. */
export function partOf(c: CallRecord): string {
  const a = c.args;
  if (c.name === 'get_holdings') return `holdings of ${argText(a.fund, '?').toUpperCase()}${a.asOf ? ` as of ${argText(a.asOf)}` : ''}`;
  if (c.name === 'compare_holdings') return `comparison of ${argText(a.fundA, '?').toUpperCase()} and ${argText(a.fundB, '?').toUpperCase()}`;
  if (c.name === 'fund_metadata') return `fund facts of ${argText(a.fund, '?').toUpperCase()}`;
  return 'the list of funds in the data';
}

/** The short reason for the unanswered list (the prose has the tool's full message). */
export function shortReason(c: CallRecord): string {
  const o = c.outcome;
  if (o.status === 'missing') return 'no result came back';
  if (o.status === 'narrowed') return `the result was too large for the model's context (${o.shown} of ${o.total} characters shown)`;
  if (o.status === 'unreadable' || o.status === 'succeeded') return 'the result could not be used';
  if (o.status === 'unknown') return 'outcome unknown';
  if (o.status === 'denied') return `denied (${o.error.code})`;
  switch (o.error.code) {
    case 'unknown_fund':
      return 'not covered by the data';
    case 'no_file_for_date': {
      // The tool names the fund and date it could not meet; the other side of a comparison may be fine.
      const m = /Fund (\S+) has no holdings file as of (\d{4}-\d{2}-\d{2})/.exec(o.error.message);
      return m ? `no file of ${m[1]} dated ${m[2]}` : 'no file of the date asked';
    }
    case 'no_readable_date':
      return 'none of its files states a readable date, so none can be chosen';
    case 'unreadable_file':
      return 'its file could not be read';
    default:
      return `failed (${o.error.code})`;
  }
}

/** The closing passage: the unanswered parts in words, then as the fenced JSON block (one passage: no blank line inside). */
export function unansweredPassage(parts: readonly UnansweredPart[]): string {
  const unique = parts.filter((p, i) => parts.findIndex((q) => q.part === p.part) === i);
  // Parts answered from a far-away file are said apart from the parts not answered, each reason once.
  const approximate = unique.filter((p) => p.reason.startsWith(APPROXIMATE_REASON));
  const missing = unique.filter((p) => !approximate.includes(p));
  const words = [
    missing.length > 0 ? `Not answered: ${missing.map((p) => `${p.part} (${p.reason})`).join('; ')}.` : '',
    approximate.length > 0
      ? `Answered only approximately: ${approximate.map((p) => `${p.part} (${p.reason.slice(APPROXIMATE_REASON.length).replace(/^, /, '')})`).join('; ')}.`
      : '',
  ]
    .filter(Boolean)
    .join(' ');
  return `${words || 'Every part of the question was answered.'}\n${UNANSWERED_FENCE}\n${JSON.stringify({ unanswered: unique })}\n\`\`\``;
}

/** Fields a question may ask for, and how fact names spell them. */
export const FACT_REQUESTS: readonly [RegExp, RegExp, string][] = [
  [/\bexpense ratio|\bexpenses?\b|\bfees?\b/i, /expense/i, 'expense ratio'],
  [/\binception\b/i, /inception/i, 'inception date'],
  [/\bbenchmark\b/i, /benchmark/i, 'benchmark'],
  [/\bshares outstanding\b/i, /shares ?out/i, 'shares outstanding'],
  [/\bnet assets\b|\bassets\b/i, /assets/i, 'net assets'],
  [/\bdividend\b/i, /div/i, 'dividend'],
];

export function factsPassage(question: string, m: FundMetadataResult, unanswered: UnansweredPart[]): string {
  const asked = FACT_REQUESTS.filter(([q]) => q.test(question));
  const fmt = (f: FundMetadataResult['facts'][number]) => `${f.field}: ${f.value} (${f.source}${f.asOf ? `, as of ${f.asOf}` : ', undated'})`;
  const sentences: string[] = [];
  for (const [, field, words] of asked) {
    const found = m.facts.filter((f) => field.test(f.field));
    if (found.length === 0) unanswered.push({ part: `${words} of ${m.fund}`, reason: 'no file in the data states it' });
    else sentences.push(`${capitalize(words)} of ${m.fund} as the files state it: ${found.map(fmt).join('; ')}.`);
  }
  if (asked.length === 0 || sentences.length === 0) {
    const facts = m.facts.slice(0, 12).map(fmt);
    const more = m.facts.length > facts.length ? ` (and ${m.facts.length - facts.length} more)` : '';
    sentences.push(
      facts.length > 0 ? `${m.fund} facts as the files state them: ${facts.join('; ')}${more}.` : `The data states no facts about ${m.fund}.`,
    );
  }
  return sentences.join(' ');
}
