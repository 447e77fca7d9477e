import { describe, it, expect } from '@jest/globals';
import {
  classifyIsharesLine,
  classifyLineByName,
  daysBetween,
  fundFromFileName,
  isoDate,
  normaliseTicker,
  parseDayMonYear,
  parseMonthDayYear,
  parseNumberText,
  parseUsDate,
} from '../src/index.js';

describe('normaliseTicker', () => {
  it('makes issuer conventions compare equal', () => {
    expect(normaliseTicker('BRK.B')).toBe('BRKB');
    expect(normaliseTicker('BRKB')).toBe('BRKB');
    expect(normaliseTicker('BF/B')).toBe('BFB');
    expect(normaliseTicker('NVDA ')).toBe('NVDA');
    expect(normaliseTicker(' brk b ')).toBe('BRKB');
  });
  it('treats blanks and placeholder dashes as no ticker', () => {
    expect(normaliseTicker('')).toBeNull();
    expect(normaliseTicker('-')).toBeNull();
    expect(normaliseTicker(null)).toBeNull();
  });
});

describe('parseNumberText', () => {
  it('reads issuer number notations', () => {
    expect(parseNumberText('41,700,670,815.44')).toBe(41700670815.44);
    expect(parseNumberText('11.75%')).toBe(11.75);
    expect(parseNumberText('$727,247,902.97')).toBe(727247902.97);
    expect(parseNumberText('(1,234.5)')).toBe(-1234.5);
    expect(parseNumberText('-0.64')).toBe(-0.64);
    expect(parseNumberText(7.97952)).toBe(7.97952);
  });
  it('returns null for non-numbers', () => {
    expect(parseNumberText('-')).toBeNull();
    expect(parseNumberText('')).toBeNull();
    expect(parseNumberText('n/a')).toBeNull();
  });
});

describe('dates', () => {
  it('reads the three issuer notations as YYYY-MM-DD', () => {
    expect(parseDayMonYear('As of 30-Sep-2025')).toBe('2025-09-30');
    expect(parseMonthDayYear('Nov 18, 2025')).toBe('2025-11-18');
    expect(parseMonthDayYear('June 30, 2025')).toBe('2025-06-30');
    expect(parseUsDate('09/26/2025')).toBe('2025-09-26');
  });
  it('rejects impossible or absent dates', () => {
    expect(parseUsDate('02/30/2025')).toBeNull();
    expect(parseUsDate('2025-09-26')).toBeNull();
    expect(parseDayMonYear('As of')).toBeNull();
    expect(isoDate(2025, 13, 1)).toBeNull();
  });
  it('counts whole days between dates in either order', () => {
    expect(daysBetween('2025-09-26', '2025-09-30')).toBe(4);
    expect(daysBetween('2025-09-30', '2025-09-26')).toBe(4);
    expect(daysBetween('2024-02-28', '2024-03-01')).toBe(2);
  });
});

describe('fundFromFileName', () => {
  it('takes the prefix before the first underscore', () => {
    expect(fundFromFileName('/x/IVV_2024-12-06.csv')).toBe('IVV');
    expect(fundFromFileName('eem.csv')).toBe('EEM');
  });
});

describe('line classification', () => {
  it('classifies iShares lines by asset class, not by ticker', () => {
    expect(classifyIsharesLine('Equity', 'Financials', 'JPMORGAN CHASE & CO')).toBe('security');
    expect(classifyIsharesLine('Cash Collateral and Margins', 'Cash and/or Derivatives', 'CASH COLLATERAL USD JPM')).toBe('collateral');
    expect(classifyIsharesLine('Money Market', 'Cash and/or Derivatives', 'BLK CSH FND TREASURY SL AGENCY')).toBe('money-market');
    expect(classifyIsharesLine('Cash', 'Cash and/or Derivatives', 'USD CASH')).toBe('cash');
    expect(classifyIsharesLine('Futures', 'Cash and/or Derivatives', 'S&P500 EMINI DEC 24')).toBe('futures');
    expect(classifyIsharesLine('FX', 'Cash and/or Derivatives', 'FX FWD')).toBe('other');
  });
  it('classifies SSGA, Invesco and ARK lines by ticker, identifier and name', () => {
    expect(classifyLineByName(null, '999USDZ92', 'US DOLLAR')).toBe('cash');
    expect(classifyLineByName(null, 'X9USDDGCM', 'DREYFUS GOVT CASH MAN INS')).toBe('money-market');
    expect(classifyLineByName(null, 'X9USDGSFT', 'GOLDMAN FS TRSY OBLIG INST 468')).toBe('money-market');
    expect(classifyLineByName('NVDA', '67066G104', 'NVIDIA CORP')).toBe('security');
    expect(classifyLineByName(null, '123456789', 'UNLISTED PRIVATE CO')).toBe('security');
    expect(classifyLineByName(null, null, 'SOMETHING ODD')).toBe('other');
  });
});
