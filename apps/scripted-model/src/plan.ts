/**
 * The scripted research policy's plan for one question: the subjects (fund, file, why), the pairs to compare, the parts that cannot be planned or are answered only approximately, and the tool calls. Pure.
 */
import { type HoldingsFileInfo, ListFundsResult, type UnansweredPart } from '@runplane/contracts';
import {
  APPROXIMATE_AFTER_DAYS,
  APPROXIMATE_REASON,
  Subject,
  askedWords,
  chooseFiles,
  daysWord,
  fileForDate,
  requestedDates,
} from './file-choice.js';
import { type QuestionDate, isoDay, readQuestionDates } from './question-dates.js';
import { askedSecurities, CHANGE_WORDS, fundIntents, HOLDINGS_WORDS, MAX_TOP, METADATA_WORDS, mentionedFunds, topN } from './question.js';
import { type ReplyToolCall } from './wire.js';

/** Most funds compared pairwise in one answer; further funds get holdings but no comparison (listed as unanswered). */
export const MAX_COMPARED_FUNDS = 4;

/**
 * What the question asks for: the subjects (fund + file + why), the pairs to compare, the funds
 * whose facts it asks for, a "top N", and the parts that cannot be planned or are answered only
 * approximately: too many funds, a date phrase that cannot be read, a requested date (`today`
 * included) met by a file more than {@link APPROXIMATE_AFTER_DAYS} days away, or a requested date
 * that none of a fund's files can meet.
 *
 * @param now the current instant; `today` / `now` / `current` / `last year` are read against it.
 */
export function questionPlan(question: string, funds: ListFundsResult | null, now: Date = new Date()) {
  const filesByFund = new Map<string, HoldingsFileInfo[]>((funds?.funds ?? []).map((f) => [f.fund.toUpperCase(), f.files]));
  const mentioned = mentionedFunds(question, filesByFund.keys());
  // each fund is researched for what its part of the question asks (`the expense ratio of VTI and
  // the weight of TSLA in QQQ`: VTI's facts, QQQ's holdings), never for what was not asked of it
  const intents = fundIntents(question, mentioned, filesByFund.keys());
  const holdingsAsked = mentioned.filter((f) => intents.holdings.has(f));
  const factsAsked = mentioned.filter((f) => intents.facts.has(f));
  const covered = funds ? holdingsAsked.filter((f) => (filesByFund.get(f)?.length ?? 0) > 0) : holdingsAsked;
  const wantsFacts = METADATA_WORDS.test(question) && factsAsked.length > 0;
  const wantsHoldings = (!METADATA_WORDS.test(question) || HOLDINGS_WORDS.test(question)) && (holdingsAsked.length > 0 || mentioned.length === 0);
  const unplanned: UnansweredPart[] = [];
  const { dates, unreadable } = readQuestionDates(question, now);
  for (const u of unreadable) unplanned.push({ part: `the date "${u.text}"`, reason: u.reason });
  let subjects: Subject[] = [];
  const pairs: [number, number][] = [];
  const oneFund = covered.length === 1 ? covered[0]! : null;
  const oneFundFiles = oneFund ? (filesByFund.get(oneFund) ?? []) : [];
  if (oneFund && funds && oneFundFiles.some((f) => f.asOf !== null) && (dates.length >= 2 || (dates.length === 1 && CHANGE_WORDS.test(question)))) {
    // One fund at several dates: its file of each date (one date and "since": that date against
    // the newest). Dates met by the same file share it, and its reason names each of them.
    const picks: Subject[] = [];
    for (const d of dates.slice(0, MAX_COMPARED_FUNDS)) {
      const pick = fileForDate(oneFund, oneFundFiles, d)!;
      const same = picks.find((p) => p.file === pick.file.file);
      if (same) same.why = `${same.why}; it is also ${alsoFor(d, pick)}`;
      else picks.push({ fund: oneFund, asOf: pick.file.asOf!, file: pick.file.file, why: pick.why, asked: { date: d, gapDays: pick.gapDays } });
      approximate(oneFund, d, pick, unplanned);
    }
    if (dates.length === 1) {
      const dated = oneFundFiles.filter((f) => f.asOf !== null);
      const newest = dated[dated.length - 1]!;
      if (newest.file !== picks[0]!.file)
        picks.push({ fund: oneFund, asOf: newest.asOf!, file: newest.file, why: 'its newest file, to compare against' });
    }
    if (picks.length >= 2) {
      // Oldest first, so each comparison reads as "then" against "later".
      subjects = [...picks].sort((x, y) => (x.asOf! < y.asOf! ? -1 : 1));
      for (let i = 0; i + 1 < subjects.length; i++) pairs.push([i, i + 1]);
    } else {
      subjects = picks;
      unplanned.push({
        part: `how ${oneFund} changed between the dates asked`,
        reason: `every date asked leads to the same file (${picks[0]!.file})`,
      });
    }
  }
  if (subjects.length === 0) {
    const requested = requestedDates(dates, question, covered);
    subjects = funds ? chooseFiles(covered, filesByFund, requested) : covered.map((fund) => ({ fund, why: 'chosen by the tool' }));
    for (const s of subjects) {
      if (s.asked) approximate(s.fund, s.asked.date, { file: { file: s.file!, asOf: s.asOf! }, gapDays: s.asked.gapDays }, unplanned);
    }
    const compared = Math.min(subjects.length, MAX_COMPARED_FUNDS);
    for (let i = 0; i < compared; i++) for (let j = i + 1; j < compared; j++) pairs.push([i, j]);
    if (subjects.length > MAX_COMPARED_FUNDS) {
      for (const s of subjects.slice(MAX_COMPARED_FUNDS)) {
        unplanned.push({
          part: `comparison of ${s.fund} with the other funds`,
          reason: `only the first ${MAX_COMPARED_FUNDS} funds named are compared pairwise`,
        });
      }
    }
  }
  const uncovered = holdingsAsked.filter((f) => !covered.includes(f));
  return {
    mentioned,
    factsAsked,
    covered,
    uncovered,
    subjects,
    pairs,
    wantsFacts,
    wantsHoldings,
    top: topN(question),
    unplanned,
    unreadable,
    today: isoDay(now),
  };
}

/** The same file standing for a further date, without repeating the first reason: `the nearest to 2026-11-30 ("now", ...), 909 days before it`. */
export function alsoFor(d: QuestionDate, pick: { file: HoldingsFileInfo; gapDays: number }): string {
  if (pick.gapDays === 0) return `the file for ${askedWords(d)}`;
  const side = pick.file.asOf! < d.from ? 'before' : 'after';
  return `the nearest to ${d.precision === 'day' ? d.from : `${d.from} to ${d.to}`} (${askedWords(d)}), ${daysWord(pick.gapDays)} ${side} ${d.precision === 'day' ? 'it' : 'that period'}`;
}

/** Lists a requested date met by a file more than {@link APPROXIMATE_AFTER_DAYS} days away as answered only approximately. */
export function approximate(
  fund: string,
  d: QuestionDate,
  pick: { file: Pick<HoldingsFileInfo, 'file' | 'asOf'>; gapDays: number },
  unplanned: UnansweredPart[],
): void {
  if (pick.gapDays <= APPROXIMATE_AFTER_DAYS) return;
  const when = d.precision === 'day' ? d.from : d.precision === 'month' ? d.from.slice(0, 7) : d.from.slice(0, 4);
  unplanned.push({
    part: d.text.includes(when) ? `${fund} as of ${when}` : `${fund} as of ${when} ("${d.text}")`,
    reason: `${APPROXIMATE_REASON}, from ${pick.file.file}, ${daysWord(pick.gapDays)} away (more than ${APPROXIMATE_AFTER_DAYS})`,
  });
}

/**
 * The research calls for the question, given the list_funds result (null when list_funds was not
 * available or did not succeed): see {@link questionPlan}. Only tools in `offered` are planned.
 * Empty when the question mentions no fund.
 */
export function planResearch(question: string, funds: ListFundsResult | null, offered: ReadonlySet<string>, now: Date = new Date()): ReplyToolCall[] {
  const plan = questionPlan(question, funds, now);
  if (plan.mentioned.length === 0) return [];
  const calls: ReplyToolCall[] = [];
  // a security asked about inside a fund (`Does SPY hold JPM?`) is looked for in the whole list,
  // so that its absence is an answer too; the answer still shows the usual few largest
  const fetchTop = plan.top ?? (askedSecurities(question, plan.covered).length > 0 ? MAX_TOP : null);
  const top = fetchTop !== null ? { top: fetchTop } : {};
  if (offered.has('get_holdings') && plan.wantsHoldings) {
    for (const s of plan.subjects) calls.push({ name: 'get_holdings', arguments: { fund: s.fund, ...(s.asOf ? { asOf: s.asOf } : {}), ...top } });
    for (const fund of plan.uncovered) calls.push({ name: 'get_holdings', arguments: { fund } });
  }
  if (offered.has('compare_holdings') && plan.wantsHoldings) {
    for (const [i, j] of plan.pairs) {
      const [a, b] = [plan.subjects[i]!, plan.subjects[j]!];
      calls.push({
        name: 'compare_holdings',
        arguments: { fundA: a.fund, fundB: b.fund, ...(a.asOf ? { asOfA: a.asOf } : {}), ...(b.asOf ? { asOfB: b.asOf } : {}) },
      });
    }
  }
  if (plan.wantsFacts && offered.has('fund_metadata')) {
    for (const fund of plan.factsAsked) calls.push({ name: 'fund_metadata', arguments: { fund } });
  }
  return calls;
}
