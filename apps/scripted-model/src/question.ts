/**
 * What a question names, for the scripted research policy: fund tickers (only in a fund position when the data's funds are known), day dates, a "top N", and whether it asks for holdings or fund facts. Pure.
 */
import { readQuestionDates } from './question-dates.js';

/** Upper-case words that look like tickers but are not funds. */
export const STOP_WORDS: ReadonlySet<string> = new Set(
  (
    'A I AN AND OR THE OF IN ON AT TO BY FOR AS IS IT BE NO NOT ANY ALL ARE WAS DO DOES HOW WHAT WHY WHO WHEN ' +
    'WITH FROM VS VS. ETF ETFS FUND USD EUR GBP US USA UK EU S&P NAV ISIN CUSIP SEDOL SEC AUM ER TER YTD QTD MTD ' +
    'CSV XLSX XLS PDF JSON API ID IDS OK IPO CEO CFO AI FAQ NB PS TLDR ASAP NYSE AMEX MSCI CRSP FTSE GICS ' +
    'REIT ADR GDP CPI FX EPS PE DIV TBD NA SPDR INC LLC PLC ESG MMF'
  ).split(/\s+/),
);

/** Day dates (YYYY-MM-DD) the text names in any written form (`Dec 6, 2024`, `12/06/2024`...), in order, without repeats. */
export function mentionedDates(text: string, now: Date = new Date()): string[] {
  return readQuestionDates(text, now)
    .dates.filter((d) => d.precision === 'day')
    .map((d) => d.from);
}

/** The question with its date phrases (read or unreadable) blanked out, so no fund is taken from them (`Q1 2024` is not fund `Q`). */
export function withoutDatePhrases(question: string): string {
  const { dates, unreadable } = readQuestionDates(question);
  let out = question;
  for (const d of [...dates, ...unreadable]) out = out.slice(0, d.index) + ' '.repeat(d.text.length) + out.slice(d.index + d.text.length);
  return out;
}

/**
 * Fund tickers the question mentions, in question order without repeats: any token naming a known
 * fund (any case, 3+ letters), plus upper-case tokens of 1-5 letters that are not {@link STOP_WORDS}.
 * With known funds (the data's list), such a token that is not one of them counts only in a fund
 * position ({@link inFundPosition}: `holdings of XYZQ`, `Compare SPY with XYZQ`, `XYZQ holdings`),
 * so a security (`tell me about NVDA`), an issuer's name (`ARK Innovation`) or an emphasised word is
 * never researched nor listed as a fund not covered. Words inside date phrases (`Q1 2024`, `as of
 * the 45th of Smarch`) are never funds.
 */
export function mentionedFunds(question: string, knownFunds: Iterable<string> = []): string[] {
  const known = new Set([...knownFunds].map((f) => f.toUpperCase()));
  const words = [...withoutDatePhrases(question).matchAll(/[A-Za-z][A-Za-z&]*|[,(]/g)].map((m) => m[0]);
  const out: string[] = [];
  words.forEach((raw, i) => {
    const upper = raw.toUpperCase();
    if (STOP_WORDS.has(upper) || out.includes(upper)) return;
    const isKnown = known.has(upper) && (raw === upper || raw.length >= 3);
    const looksLikeTicker = /^[A-Z]{1,5}$/.test(raw);
    if (isKnown || (looksLikeTicker && (known.size === 0 || inFundPosition(words, i, (w) => known.has(w.toUpperCase()) || out.includes(w)))))
      out.push(upper);
  });
  return out;
}

/** True when the word at `i` is followed by `in` and a fund (`NVDA in SPY`, `NVDA in the SPY`). */
function inAFund(words: readonly string[], i: number, isFund: (word: string) => boolean): boolean {
  return heldBy(words, i, isFund) !== null;
}

/** Verbs by which a question asks whether a fund holds a security (`Does SPY hold JPM?`). */
const HOLD_VERBS = new Set(['hold', 'holds', 'own', 'owns', 'include', 'includes', 'contain', 'contains', 'have', 'has']);

/**
 * The fund the word at `i` is asked about as a holding of, or null: `JPM in SPY` (`in the SPY`),
 * `SPY holds JPM` / `Does SPY hold any JPM`, `shares of AAPL does SPY hold`, `JPM held by SPY`.
 */
function heldBy(words: readonly string[], i: number, isFund: (word: string) => boolean): string | null {
  const lower = (k: number) => words[k]?.toLowerCase();
  const fund = (k: number) => (words[k] !== undefined && isFund(words[k]) ? words[k] : null);
  if (lower(i + 1) === 'in') return fund(lower(i + 2) === 'the' ? i + 3 : i + 2);
  if (lower(i + 1) === 'held' && lower(i + 2) === 'by') return fund(lower(i + 3) === 'the' ? i + 4 : i + 3);
  const verbAt = lower(i - 1) === 'any' ? i - 2 : i - 1;
  if (HOLD_VERBS.has(lower(verbAt) ?? '')) return fund(verbAt - 1);
  if (['does', 'do', 'did'].includes(lower(i + 1) ?? '') && HOLD_VERBS.has(lower(i + 3) ?? '')) return fund(i + 2);
  return null;
}

/**
 * Securities the question asks about inside a fund of the data (`What is the weight of NVDA in
 * SPY?`, `Does SPY hold JPM?`, `How many shares of AAPL does SPY hold?`: `[{ security: 'NVDA', fund:
 * 'SPY' }]`): an upper-case token of 1-5 letters (`BRK.B` too), not a {@link STOP_WORDS} word nor a
 * known fund, that a known fund is said to hold ({@link heldBy}).
 */
export function askedSecurities(question: string, knownFunds: Iterable<string>): { security: string; fund: string }[] {
  const known = new Set([...knownFunds].map((f) => f.toUpperCase()));
  const words = [...withoutDatePhrases(question).matchAll(/[A-Za-z][A-Za-z&]*(?:\.[A-Z]\b)?|[,(]/g)].map((m) => m[0]);
  const out: { security: string; fund: string }[] = [];
  words.forEach((raw, i) => {
    if (!/^[A-Z]{1,5}(?:\.[A-Z])?$/.test(raw) || STOP_WORDS.has(raw) || known.has(raw)) return;
    const fund = heldBy(words, i, (w) => known.has(w.toUpperCase()))?.toUpperCase();
    if (fund && !out.some((o) => o.security === raw && o.fund === fund)) out.push({ security: raw, fund });
  });
  return out;
}

/** Words that join funds named together (`SPY and QQQ`, `SPY vs QQQ`, `EEM, ODD`). */
export const JOINERS = new Set(['and', 'or', 'with', 'vs', 'versus', 'against', 'to', ',', '(']);

/** Words a fund follows (`holdings of XYZQ`, `compare XYZQ`) or that follow a fund (`XYZQ holdings`). */
export const LEADS = new Set(['compare', 'of', 'for', 'fund', 'etf']);

export const TRAILS = new Set(['holdings', 'holding', 'fund', 'funds', 'etf', 'etfs', 'vs', 'versus']);

/**
 * True when the word at `i` of `words` (the question's words, `,` and `(` kept) stands where a
 * fund is named: after a lead word (`compare`, `of`, `for`), after or before another fund across a
 * joiner (`and`, `with`, `vs`, `,`), or before `holdings` / `fund` / `ETF`; never when a capitalised
 * word follows it (`ARK Innovation`: part of a name).
 */
export function inFundPosition(words: readonly string[], i: number, isFund: (word: string) => boolean): boolean {
  const next = words[i + 1];
  // a security inside a fund (`the weight of NVDA in SPY`): not a fund itself
  if (inAFund(words, i, isFund)) return false;
  if (next && /^[A-Z][a-z]/.test(next) && !TRAILS.has(next.toLowerCase())) return false;
  if (next && TRAILS.has(next.toLowerCase())) return true;
  let j = i - 1;
  while (j >= 0 && JOINERS.has(words[j]!.toLowerCase())) j--;
  const joinedBefore = j < i - 1;
  if (j >= 0 && (LEADS.has(words[j]!.toLowerCase()) || (joinedBefore && isFund(words[j]!)))) return true;
  let k = i + 1;
  while (k < words.length && JOINERS.has(words[k]!.toLowerCase())) k++;
  return k > i + 1 && k < words.length && isFund(words[k]!);
}

export const METADATA_WORDS = /\b(expense ratio|expenses?|inception|shares outstanding|metadata|fact ?sheet|benchmark|fees?|net assets|dividend)\b/i;

export const HOLDINGS_WORDS =
  /\b(holdings?|hold|holds|compare|comparison|overlap|top|weights?|gaps?|coverage|securities|stocks|names|changed?|since|vs\.?|versus)\b/i;

/** Words by which a question asks for a comparison (`compare`, `vs`, `overlap`, `in common`, `differ`, `both`). */
export const COMPARE_WORDS = /\b(compar\w*|vs\.?|versus|overlap\w*|in common|common|differ\w*|between|both|against)\b/i;

/**
 * What the question asks of each fund it names, part by part ({@link questionParts}): `facts` for
 * a fund named in a part that asks for fund facts and no holdings (`What is the expense ratio of
 * VTI`), `holdings` for one named in any other part. A part that names no fund but refers to one
 * (`... and what does it hold?`, `... and what is its expense ratio?`) asks its part of every fund
 * named; a fund no part names alone is asked what the whole question asks.
 * @param mentioned the funds the whole question names ({@link mentionedFunds}).
 */
export function fundIntents(
  question: string,
  mentioned: readonly string[],
  knownFunds: Iterable<string> = [],
): { holdings: Set<string>; facts: Set<string> } {
  const known = [...knownFunds];
  const holdings = new Set<string>();
  const facts = new Set<string>();
  const wantsFacts = (text: string) => METADATA_WORDS.test(text);
  const wantsHoldings = (text: string) => !wantsFacts(text) || HOLDINGS_WORDS.test(text);
  const seen = new Set<string>();
  for (const part of questionParts(question)) {
    const named = mentionedFunds(part, known).filter((f) => mentioned.includes(f));
    if (named.length === 0 && /\b(it|its|they|them|their|each|both|these|those)\b/i.test(part)) {
      for (const f of mentioned) {
        if (wantsFacts(part)) facts.add(f);
        if (wantsHoldings(part)) holdings.add(f);
      }
    }
    for (const f of named) {
      seen.add(f);
      if (wantsFacts(part)) facts.add(f);
      if (wantsHoldings(part)) holdings.add(f);
    }
  }
  for (const f of mentioned) {
    if (seen.has(f)) continue;
    if (wantsFacts(question)) facts.add(f);
    if (wantsHoldings(question)) holdings.add(f);
  }
  return { holdings, facts };
}

export const CHANGE_WORDS = /\b(since|changed?|changes|evolved?|latest|newest)\b/i;

export const NUMBER_WORDS: Record<string, number> = { five: 5, ten: 10, twenty: 20, fifteen: 15, three: 3 };

/** The most holdings one `get_holdings` call returns (libs/contracts tools.ts, `top`). */
export const MAX_TOP = 500;

/** Words for a fund's holdings as a list (`all 30 holdings`, `every constituent`). */
const LIST_WORDS = '(?:holdings|positions|stocks|constituents|components|companies|securities|names)';

/**
 * The N of "top N" / "N largest" / "Nth largest" / "all N holdings" / "the N holdings" in the
 * question (1-500), {@link MAX_TOP} for the whole list ("all holdings", "every holding", "the full
 * list"), or `null`.
 */
export function topN(question: string): number | null {
  const m = new RegExp(
    `\\btop[- ](\\d{1,3}|five|ten|fifteen|twenty|three)\\b|\\b(\\d{1,3}|five|ten|twenty) (?:largest|biggest|heaviest)\\b|\\b(\\d{1,3})(?:st|nd|rd|th) (?:largest|biggest|heaviest)\\b|\\b(?:all|the|its|their) (\\d{1,3}|five|ten|fifteen|twenty|three) ${LIST_WORDS}\\b`,
    'i',
  ).exec(question);
  const word = (m?.[1] ?? m?.[2] ?? m?.[3] ?? m?.[4])?.toLowerCase();
  if (!word)
    return new RegExp(
      `\\b(?:all (?:of )?(?:the |its |their )?${LIST_WORDS}|every (?:holding|position|constituent|component|stock)|(?:full|complete|whole|entire) (?:list|holdings))\\b`,
      'i',
    ).test(question)
      ? MAX_TOP
      : null;
  const n = NUMBER_WORDS[word] ?? Number(word);
  return n >= 1 && n <= MAX_TOP ? n : null;
}

/**
 * Words by which a question asks for the smallest holdings (`the 5 smallest holdings`, `bottom
 * 10`, `lowest weights`): the holdings tool returns the largest by weight only, so such a part is
 * listed as unanswered, never answered with the largest.
 */
export const SMALLEST_WORDS = /\b(smallest|lowest|bottom|least|tiniest)\b/i;

/** Words by which a question asks for holdings by rank or size (`its 10th largest position`). */
const RANK_WORDS = /\b(largest|biggest|heaviest|positions?)\b/i;

/** Words by which a question asks how many shares a fund holds, which the holdings tool does not return. */
export const SHARE_COUNT_WORDS = /\b(how many shares|number of shares|share counts?|shares held)\b/i;

/** Words by which a question asks for sectors or industries, which the holdings tool does not return. */
export const SECTOR_WORDS = /\b(sectors?|industr(?:y|ies))\b/i;

/** Words by which a question asks for advice (`Should I buy SPY or QQQ?`), which research on holdings files does not give. */
export const ADVICE_WORDS = /\b(should I|should we|buy|sell|recommend(?:ation)?s?|invest in|worth investing|(?:good|better|best|bad) investment)\b/i;

/**
 * Words by which a part of a question asks for what holdings files do not hold: performance,
 * returns, prices, news, the manager, the launch, risk, forecasts (`How has QQQ performed?`, `...
 * and who manages SPY`). Such a part is listed as not answered even when it names a fund.
 */
export const OUTSIDE_THE_DATA_WORDS =
  /\b(perform(?:ed|ance|s)?|returns?|price history|prices?|news|headlines|manag(?:e|es|ed|er|ers|ing)|launch(?:ed|es)?|risk(?:s|y)?|volatil\w*|forecasts?|predict\w*|outlook|weather)\b/i;

/**
 * The parts of a question, split at `?`, `!`, `;`, a sentence's end, and at an `and` that starts a
 * new ask (`... and who manages it`, `... and tell me ...`), trimmed, without empty ones.
 */
export function questionParts(question: string): string[] {
  return question
    .split(/[?!;]|\.\s|,?\s+and\s+(?=(?:who|what|when|where|why|how|which|tell|give|show|list|is|are|was|were|does|do|did|can)\b)/i)
    .map((p) => p.trim().replace(/[.,:]+$/, ''))
    .filter((p) => p.length > 0);
}

/**
 * True when a part of a question asks for what holdings files do not hold
 * ({@link OUTSIDE_THE_DATA_WORDS}: `how has QQQ performed`), or for nothing the research policy
 * reads: it names no fund, no ticker-like word, none of the holdings, fund-fact, coverage, sector
 * or advice words, and no date (`tell me tomorrow's weather in Paris`).
 */
export function asksOutsideTheData(part: string, knownFunds: Iterable<string>): boolean {
  if (OUTSIDE_THE_DATA_WORDS.test(part) && !ADVICE_WORDS.test(part)) return true;
  if (part.split(/\s+/).length < 2) return false;
  if (mentionedFunds(part, knownFunds).length > 0) return false;
  // a ticker-like word (a security: `tell me about NVDA`) may be answered by the holdings read
  if ((part.match(/\b[A-Z]{2,5}\b/g) ?? []).some((w) => !STOP_WORDS.has(w))) return false;
  if ([HOLDINGS_WORDS, METADATA_WORDS, COVERAGE_WORDS, SECTOR_WORDS, ADVICE_WORDS, SMALLEST_WORDS, RANK_WORDS].some((w) => w.test(part)))
    return false;
  return readQuestionDates(part).dates.length === 0;
}

/**
 * Words by which a question that names no fund asks what the data covers (`Which funds do you
 * have?`, `list the ETFs`, `what data is there`): the list of funds answers it whole.
 */
export const COVERAGE_WORDS = /\b(funds?|etfs?|data|files?|tickers?|covers?|covered|coverage|available)\b/i;

/** Words by which a follow-up points back at what was asked before (`compare it with QQQ`, `them too`, `the same for IVV`). */
const BACK_REFERENCE = /\b(?:it|its|them|they|those|these|both|same|also|too|again|previous|earlier)\b/i;

/**
 * A follow-up message read with the request it follows up (a continuation's or a clarification's
 * original request): the message alone when it names a fund and points back at nothing (a new
 * question), else the message and the earlier request together, one line each, so that the funds,
 * dates and asks of both count (`please finish`; `Now compare it with QQQ`; `Annualized`, a
 * clarification's answer).
 */
export function followUp(current: string, earlier: string): string {
  if (mentionedFunds(current).length > 0 && !BACK_REFERENCE.test(withoutDatePhrases(current))) return current;
  return `${current}\n${earlier}`;
}
