/**
 * The question's dates as a fresh-user review of the answers asked: a bare year after "compared with", quarters,
 * relative words against a fixed clock, and date-like phrases that cannot be read (reported, never
 * dropped).
 */
import { describe, expect, it } from '@jest/globals';
import { readQuestionDates } from '../src/question-dates.js';

const NOW = new Date(Date.UTC(2026, 10, 30, 15));
const read = (q: string) => readQuestionDates(q, NOW);
const spans = (q: string) => read(q).dates.map((d) => [d.text, d.precision, d.from, d.to]);

describe('readQuestionDates', () => {
  it('reads a bare year after "compared with" next to a day and "now" (reviewer defect A)', () => {
    const q = "What were ARKK's top 5 holdings on 6 December 2024, and what does ARKK hold now compared with 2021?";
    expect(spans(q)).toEqual([
      ['on 6 December 2024', 'day', '2024-12-06', '2024-12-06'],
      ['now', 'day', '2026-11-30', '2026-11-30'],
      ['compared with 2021', 'year', '2021-01-01', '2021-12-31'],
    ]);
    expect(read(q).dates[1]!.reading).toBe('the current date, 2026-11-30');
    expect(read(q).unreadable).toEqual([]);
  });

  it('reads quarters as the end of the quarter and says so (defect B)', () => {
    expect(spans('SPY holdings in Q1 2024')).toEqual([['Q1 2024', 'day', '2024-03-31', '2024-03-31']]);
    expect(read('SPY holdings in Q1 2024').dates[0]!.reading).toBe('the end of that quarter, 2024-03-31');
    expect(spans('QQQ vs SPY Q3 2025')).toEqual([['Q3 2025', 'day', '2025-09-30', '2025-09-30']]);
    expect(spans('the third quarter of 2025')).toEqual([['third quarter of 2025', 'day', '2025-09-30', '2025-09-30']]);
  });

  it('reads relative words against the clock passed in (defect B, D)', () => {
    expect(spans('SPY as of last year')).toEqual([['last year', 'year', '2025-01-01', '2025-12-31']]);
    expect(read('SPY as of last year').dates[0]!.reading).toMatch(/2025.*2026-11-30/);
    expect(spans('What does SPY hold today?')).toEqual([['today', 'day', '2026-11-30', '2026-11-30']]);
    expect(spans('current holdings of QQQ')).toEqual([['current', 'day', '2026-11-30', '2026-11-30']]);
    expect(spans('SPY 3 months ago')).toEqual([['3 months ago', 'day', '2026-08-30', '2026-08-30']]);
  });

  it('reports date-like phrases it cannot read or that name no real day (defect B, C)', () => {
    expect(read('SPY on 2025-09-31').dates).toEqual([]);
    expect(read('SPY on 2025-09-31').unreadable).toEqual([{ text: '2025-09-31', index: 7, reason: 'there is no such day' }]);
    expect(read('Q5 2024 SPY').unreadable.map((u) => u.text)).toEqual(['Q5 2024']);
    expect(read('SPY as of the 45th of Smarch').unreadable.map((u) => u.text)).toEqual(['as of the 45th of Smarch']);
    expect(read('SPY 12/06/2024 and QQQ 13/45/2025').unreadable).toEqual([{ text: '13/45/2025', index: 23, reason: 'there is no such day' }]);
    expect(spans('SPY 12/06/2024 and QQQ 13/45/2025')).toEqual([['12/06/2024', 'day', '2024-12-06', '2024-12-06']]);
  });

  it('keeps the forms read before, and takes no year from "Russell 2000" or a question without dates', () => {
    expect(spans('SPY end of 2024 vs QQQ December 2024')).toEqual([
      ['end of 2024', 'day', '2024-12-31', '2024-12-31'],
      ['December 2024', 'month', '2024-12-01', '2024-12-31'],
    ]);
    expect(spans('SPY since 2021')).toEqual([['since 2021', 'year', '2021-01-01', '2021-12-31']]);
    expect(spans('IWM and the Russell 2000 as of Dec 6, 2024')).toEqual([['Dec 6, 2024', 'day', '2024-12-06', '2024-12-06']]);
    const plain = read('Compare the holdings of SPY and QQQ: verify the disclosure date of each file and identify gaps in coverage');
    expect(plain).toEqual({ dates: [], unreadable: [] });
  });
});
