/**
 * The offline research policy: a deterministic stand-in for a model that answers fund-holdings
 * questions with the tool pack of `@runplane/contracts`. It is a pure function of the request's
 * messages and tools; every figure in its answer is read from the tool results in the messages.
 *
 * Plan for one user question (only messages after the last user message count; a follow-up is read
 * with the request it continues, `./conversation.ts` `currentRequest`):
 * 1. nothing called yet: call `list_funds` (when offered);
 * 2. then, in one turn, `get_holdings` for every fund the question mentions (covered or not; with
 *    `top` when it asks for a "top N"), `compare_holdings` for every pair of covered funds (up to
 *    {@link MAX_COMPARED_FUNDS}; one fund and two dates = that fund's two files), and
 *    `fund_metadata` per fund when it asks for fund facts. Files are chosen by {@link chooseFiles}:
 *    the dates the question names (in any form people write them), else the closest dates between
 *    the funds, else the newest;
 * 3. once every call has a tool message: the final answer, passages separated by blank lines,
 *    ending with the parts it could not answer as a fenced JSON block ({@link UNANSWERED_FENCE}).
 *
 * It is a test double, split by concern: `./conversation.ts` (the question and the calls made),
 * `./question.ts` (funds, top N, what is asked), `./question-dates.ts` (the dates named),
 * `./file-choice.ts` (which file stands for each fund), `./plan.ts` (the plan and its calls),
 * `./answer-text.ts` (the wording of figures and failures), `./research-limits.ts` (what the
 * research cannot give: sectors, advice, what holdings files do not hold), `./unanswered-list.ts`
 * (the parts not answered and the closing block). It claims only what the question and the files support: the
 * reason a file was chosen is its own, never the tool's "as requested" for a date it picked itself.
 */
import {
  CompareHoldingsResult,
  type FileSelection,
  FundMetadataResult,
  isParkingTool,
  GetHoldingsResult,
  type HoldingLine,
  type HoldingsSummary,
  ListFundsResult,
  ToolPack,
  type ToolName,
  type UnansweredPart,
} from '@runplane/contracts';
import {
  ILLUSTRATIVE_NOTE,
  argText,
  dateText,
  datesPassage,
  daysText,
  endSentences,
  failureSentence,
  fundPassage,
  fundsOverview,
  gapsPassage,
  overlapPassage,
  plural,
  succeeded,
  unreadableDatesSentence,
} from './answer-text.js';
import { currentRequest, currentTurnCalls, type CallRecord } from './conversation.js';
import { planResearch, questionPlan } from './plan.js';
import { askedSecurities, COMPARE_WORDS, COVERAGE_WORDS, MAX_TOP, SHARE_COUNT_WORDS } from './question.js';
import { beyondTheResearch } from './research-limits.js';
import { factsPassage, partOf, shortReason, unansweredPassage } from './unanswered-list.js';
import { type Reply, type WireMessage, type WireTool } from './wire.js';

/**
 * The final answer for the question from the tool calls of the current turn: passages separated
 * by blank lines, dates as YYYY-MM-DD, derived percentages with 1 decimal. Every figure is read
 * from the tool results; each fund's file is named with why it was chosen; failed, denied,
 * unknown and missing calls get their own passage. The last passage lists the parts not answered,
 * in words and as a fenced JSON block ({@link extractUnanswered}).
 */
export function writeAnswer(question: string, turnCalls: readonly CallRecord[], now: Date = new Date()): string {
  const calls = researchCalls(turnCalls);
  const listCall = calls.find((c) => c.name === 'list_funds');
  const funds = succeeded(listCall, ListFundsResult) ?? null;
  const known = funds ? new Set(funds.funds.filter((f) => f.files.length > 0).map((f) => f.fund.toUpperCase())) : null;
  const illustrative = funds?.dataSet === 'illustrative';
  const plan = questionPlan(question, funds, now);
  const why = new Map(plan.subjects.filter((s) => s.file).map((s) => [s.file!, s.why]));

  const holdings = calls.filter((c) => c.name === 'get_holdings').map((c) => ({ call: c, result: succeeded(c, GetHoldingsResult) }));
  const compares = calls.filter((c) => c.name === 'compare_holdings').map((c) => ({ call: c, result: succeeded(c, CompareHoldingsResult) }));
  const metadata = calls.filter((c) => c.name === 'fund_metadata').map((c) => ({ call: c, result: succeeded(c, FundMetadataResult) }));
  // a pack tool's result schema (the contract's), null for a tool outside the pack
  const schemaOf = (name: string) => (Object.prototype.hasOwnProperty.call(ToolPack, name) ? ToolPack[name as ToolName].result : null);
  const failedCalls = calls.filter((c) => {
    const schema = schemaOf(c.name);
    return c.outcome.status !== 'succeeded' || (schema !== null && !schema.safeParse(c.outcome.result).success);
  });
  // Each failure's message is said once in the prose; the unanswered list gives a short reason.
  const saidMessages = new Set<string>();
  const failures = failedCalls.map((c) => failureSentence(c, known, saidMessages));
  const unanswered: UnansweredPart[] = [...plan.unplanned];
  for (const c of failedCalls) {
    if (c.name === 'list_funds') continue;
    unanswered.push({ part: partOf(c), reason: shortReason(c) });
  }

  const passages: string[] = [];
  const researched = holdings.length > 0 || compares.length > 0 || metadata.length > 0;

  if (!researched) {
    // No fund mentioned (or no research tool offered): answer from list_funds.
    if (funds) {
      const intro =
        plan.mentioned.length === 0
          ? 'The question names no fund ticker, so here is what the data covers.'
          : 'The holdings tools were not available, so here is only what the data covers.';
      passages.push(
        [intro, illustrative ? ILLUSTRATIVE_NOTE : '', plan.unreadable.length > 0 ? unreadableDatesSentence(plan.unreadable) : '']
          .filter(Boolean)
          .join(' '),
      );
      passages.push(fundsOverview(funds));
      if (funds.otherFiles.length > 0) {
        const notes = new Map((funds.otherFileNotes ?? []).map((n) => [n.file, n]));
        const unread = funds.otherFiles.filter((f) => notes.get(f)?.kind === 'not-holdings');
        passages.push(
          `Other files in the data, not read as holdings files: ${funds.otherFiles.join(', ')}.` +
            (unread.length > 0 && unread.length <= 5 ? ` ${unread.map((f) => notes.get(f)!.reason).join(' ')}` : ''),
        );
      }
      passages.push('Name one or more fund tickers to get their holdings, the verified disclosure dates and a comparison.');
      // a question about something else (`What is the capital of France?`) is not answered by the
      // list of funds: it is listed as unanswered, never settled as answered (K9)
      if (plan.mentioned.length === 0 && !COVERAGE_WORDS.test(question))
        unanswered.push({ part: 'the question', reason: 'it names no fund in the data; only the funds the data covers were listed' });
      if (plan.mentioned.length > 0)
        for (const f of plan.mentioned) unanswered.push({ part: `research on ${f}`, reason: 'the holdings tools were not available' });
    } else if (calls.length === 0) {
      passages.push('No research tools were available, so the holdings data could not be read; nothing is assumed about it.');
      unanswered.push({ part: 'the whole question', reason: 'no research tools were available' });
    } else {
      passages.push('The data could not be read, so the question cannot be answered from it; nothing is assumed.');
      unanswered.push({ part: 'the whole question', reason: 'the data could not be read' });
    }
    if (failures.length > 0) passages.push(endSentences(failures));
    passages.push(unansweredPassage(unanswered));
    return passages.join('\n\n');
  }

  // Which file each fund was read from: get_holdings results, and the comparisons' summaries.
  // The tool's own note on its pick is kept only when the tool chose (`newest`): a `requested-date`
  // note ("as requested") echoes the date this policy passed, which the question may never have asked.
  const toolsPick = (sel: FileSelection) => (sel.rule === 'requested-date' ? undefined : sel.detail);
  const summaries = new Map<string, { summary: HoldingsSummary; top: HoldingLine[]; selection?: string | undefined }>();
  for (const h of holdings)
    if (h.result) summaries.set(h.result.file, { summary: h.result, top: h.result.top, selection: toolsPick(h.result.selection) });
  for (const c of compares) {
    if (!c.result) continue;
    for (const [s, sel] of [
      [c.result.a, c.result.selectionA],
      [c.result.b, c.result.selectionB],
    ] as const) {
      if (!summaries.has(s.file)) summaries.set(s.file, { summary: s, top: [], selection: toolsPick(sel) });
    }
  }
  const sameFundTwice = new Set([...summaries.values()].map((s) => s.summary.fund)).size < summaries.size;
  const nameOf = (s: HoldingsSummary) => (sameFundTwice ? `${s.fund} ${s.asOf ?? s.file}` : s.fund);
  const okCompares = compares.filter((c) => c.result).map((c) => c.result!);

  // Passage 1: what was answered.
  const intro: string[] = [];
  if (okCompares.length > 0) {
    for (const c of okCompares) {
      intro.push(
        `${nameOf(c.a)} (${dateText(c.a)}) and ${nameOf(c.b)} (${dateText(c.b)}) were compared from their holdings files ${c.a.file} and ${c.b.file}; ${daysText(c.daysBetween)}; ${plural(c.commonCount, 'security', 'securities')} in common.`,
      );
    }
  } else if (summaries.size > 0) {
    intro.push(`Holdings read: ${[...summaries.values()].map((s) => `${s.summary.fund} ${dateText(s.summary)} from ${s.summary.file}`).join('; ')}.`);
    const asked = holdings.map((h) => argText(h.call.args.fund).toUpperCase());
    const readFunds = new Set([...summaries.values()].map((s) => s.summary.fund.toUpperCase()));
    // said only when a comparison was asked for: two funds read for other parts were not meant to be compared
    if (new Set(asked).size >= 2 && compares.length === 0 && COMPARE_WORDS.test(question))
      intro.push(
        readFunds.size >= 2
          ? 'No comparison was made.'
          : `No comparison was made: fewer than two of ${[...new Set(asked)].join(', ')} are covered by the data.`,
      );
    if (compares.length > 0) intro.push('The comparison did not succeed; see below.');
  } else if (holdings.length > 0 || compares.length > 0) {
    const asked = holdings.map((h) => argText(h.call.args.fund, '?').toUpperCase());
    intro.push(
      asked.length > 0
        ? `None of the funds asked about (${asked.join(', ')}) could be read from the data.`
        : 'No holdings could be read from the data.',
    );
    if (funds) intro.push(`Funds the data covers: ${funds.funds.map((f) => f.fund).join(', ')}.`);
  } else {
    intro.push(`Fund facts for ${metadata.map((m) => argText(m.call.args.fund, '?').toUpperCase()).join(', ')}, as the files state them.`);
  }
  if (illustrative) intro.push(ILLUSTRATIVE_NOTE);
  if (plan.unreadable.length > 0) intro.push(unreadableDatesSentence(plan.unreadable));
  passages.push(intro.join(' '));

  // One passage per file read; the "as the file states them" note once.
  const topCount = plan.top ?? 5;
  const said = new Set<string>();
  [...summaries.values()].forEach((s, i) => {
    // A reason shared by several files (the closest dates between the funds) is given once.
    const reason = why.get(s.summary.file) ?? s.selection;
    passages.push(fundPassage(nameOf(s.summary), s.summary, s.top, topCount, reason && !said.has(reason) ? reason : undefined, i === 0));
    if (reason) said.add(reason);
  });
  if (plan.top !== null) {
    for (const s of summaries.values()) {
      if (s.top.length > 0 && s.top.length < plan.top && s.summary.securityCount > s.top.length) {
        unanswered.push({ part: `top ${plan.top} holdings of ${s.summary.fund}`, reason: `only ${s.top.length} came back` });
      } else if (plan.top === MAX_TOP && s.summary.securityCount > s.top.length) {
        // the whole list asked for ("all holdings") of a fund of more than one call returns
        unanswered.push({
          part: `all ${s.summary.securityCount} holdings of ${s.summary.fund}`,
          reason: `one holdings call returns at most ${MAX_TOP}; ${s.top.length} came back`,
        });
      }
    }
  }

  // what the research cannot give is listed, never passed over as answered (K9)
  const fundsRead = [...new Set([...summaries.values()].map((s) => s.summary.fund))];
  unanswered.push(...beyondTheResearch(question, fundsRead, plan.covered, known ?? plan.mentioned));

  // a security asked about inside a fund (`the weight of XOM in SPY`) is answered only when it is
  // among the holdings read; else it is listed, never passed over as answered
  for (const { security, fund } of askedSecurities(question, known ?? [])) {
    const read = [...summaries.values()].filter((s) => s.summary.fund.toUpperCase() === fund);
    const found = read.flatMap((s) => s.top.filter((l) => l.ticker?.toUpperCase() === security).map((line) => ({ line, file: s.summary.file })));
    const weighed = found.filter((f) => f.line.weight !== null);
    // every line of the file read: a security not among them is not held (as of that file)
    const whole = read.filter((s) => s.top.length > 0 && s.top.length >= s.summary.securityCount);
    if (weighed.length > 0)
      passages.push(
        weighed.map((f) => `${security} (${f.line.name}) is ${f.line.weight!.toFixed(2)}% of ${fund} in ${f.file}, as the file states it.`).join(' '),
      );
    else if (found.length === 0 && whole.length > 0)
      passages.push(
        whole
          .map((s) => `${fund} does not hold ${security}: it is not among the ${s.summary.securityCount} holdings in ${s.summary.file}.`)
          .join(' '),
      );
    else unanswered.push({ part: `the weight of ${security} in ${fund}`, reason: `${security} is not among the largest holdings read` });
    // the holdings files give weights, not share counts (the holdings tool returns no shares)
    if (SHARE_COUNT_WORDS.test(question))
      unanswered.push({ part: `the number of shares of ${security} in ${fund}`, reason: 'the holdings tool returns weights, not share counts' });
  }

  for (const c of okCompares) {
    passages.push(overlapPassage(nameOf(c.a), nameOf(c.b), c));
    passages.push(gapsPassage(nameOf(c.a), nameOf(c.b), c));
  }

  if (summaries.size > 0)
    passages.push(
      datesPassage(
        [...summaries.values()].map((s) => s.summary),
        funds,
      ),
    );

  for (const m of metadata) if (m.result) passages.push(factsPassage(question, m.result, unanswered));

  // What the question needed that this Run did not do (research cut short, or calls other than the
  // plan's) is listed as unanswered too: the answer never claims more than was read (K9).
  const read = new Set([...summaries.values()].map((s) => s.summary.fund.toUpperCase()));
  const listed = (fund: string) => unanswered.some((u) => u.part.toUpperCase().includes(fund.toUpperCase()));
  if (plan.wantsHoldings)
    for (const f of plan.covered)
      if (!read.has(f.toUpperCase()) && !listed(f)) unanswered.push({ part: `holdings of ${f}`, reason: 'not read in this Run' });
  if (plan.pairs.length > 0 && okCompares.length === 0 && !unanswered.some((u) => /compar/i.test(u.part)))
    unanswered.push({ part: `the comparison of ${plan.covered.join(' and ')}`, reason: 'no comparison was made' });

  if (failures.length > 0) passages.push(endSentences(failures));
  passages.push(unansweredPassage(unanswered));
  return passages.join('\n\n');
}

/**
 * The turn's research calls: all but the parking tools' (`ask_human`, `spawn_subagent`,
 * `ask_clarification`, K10). A question put to a human or a sub-agent is not research: it neither
 * counts as research done nor, unanswered, as a failed research call (K8: its outcome stops only
 * itself); the research goes on as if it had not been asked.
 */
export function researchCalls(calls: readonly CallRecord[]): CallRecord[] {
  return calls.filter((c) => !isParkingTool(c.name));
}

/**
 * The research policy: given a chat request's messages and offered tools, the next reply.
 * Tool calls (finish `tool_calls`) while research remains, else the final answer (finish `stop`).
 * Deterministic and pure given `now` (the clock: `today`, `now`, `current`, `last year` in the
 * question are read against its UTC date; the server passes the machine's, tests fix it); never
 * throws on odd input (unreadable tool messages are reported).
 */
export function researchPolicy(messages: readonly WireMessage[], tools: readonly WireTool[] | undefined, now: Date = new Date()): Reply {
  const offered = new Set((tools ?? []).map((t) => t.function.name));
  const question = currentRequest(messages);
  const calls = researchCalls(currentTurnCalls(messages));

  if (calls.length === 0 && offered.has('list_funds')) {
    return { toolCalls: [{ name: 'list_funds', arguments: {} }], finishReason: 'tool_calls' };
  }
  const researched = calls.some((c) => c.name !== 'list_funds');
  if (!researched) {
    const funds =
      succeeded(
        calls.find((c) => c.name === 'list_funds'),
        ListFundsResult,
      ) ?? null;
    const plan = planResearch(question, funds, offered, now);
    if (plan.length > 0) return { toolCalls: plan, finishReason: 'tool_calls' };
  }
  return { content: writeAnswer(question, calls, now), finishReason: 'stop' };
}
