import { describe, expect, it } from '@jest/globals';
import {
  AdmissionPort,
  BusConfig,
  CorsConfig,
  DatabaseConfig,
  LimitsConfig,
  ModelConfig,
  ParkingToolsConfig,
  TestToolsConfig,
  MemoryConfig,
  ToolsConfig,
  ViewerConfig,
  loadConfig,
  natsServerList,
} from '@runplane/contracts';

describe('configuration from the environment (zod, validated at start-up)', () => {
  it('uses the documented defaults when variables are unset or empty', () => {
    expect(loadConfig(LimitsConfig, {})).toEqual({
      RUNPLANE_MAX_MODEL_REQUESTS: 8,
      RUNPLANE_MAX_TOOL_CALLS: 16,
      RUNPLANE_RUN_DEADLINE_SECONDS: 900,
      RUNPLANE_MAX_INPUT_TOKENS: 2_000_000,
      RUNPLANE_MAX_OUTPUT_TOKENS: 64_000,
      RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: 1,
      RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS: 4_000,
      RUNPLANE_NO_PROGRESS_SECONDS: 300,
    });
    expect(loadConfig(LimitsConfig, { RUNPLANE_MAX_TOOL_CALLS: '' }).RUNPLANE_MAX_TOOL_CALLS).toBe(16);
    expect(loadConfig(ToolsConfig, {}).RUNPLANE_TOOL_TIMEOUT_MS).toBe(60_000);
    expect(loadConfig(BusConfig, {})).toMatchObject({
      NATS_URL: 'nats://127.0.0.1:4222',
      RUNPLANE_STREAM: 'RUNPLANE',
      RUNPLANE_SUBJECT_PREFIX: 'rp',
    });
  });

  it.each(['abc', '0x1F90', '1e3', '-1', '12abc', '70000'])('refuses ADMISSION_PORT=%s with the variable named', (value) => {
    expect(() => loadConfig(AdmissionPort, { ADMISSION_PORT: value })).toThrow(/Invalid configuration: ADMISSION_PORT/);
  });

  it('given a DATABASE_URL that is not a PostgreSQL URL, then start-up is refused naming the variable, never repeating the value', () => {
    for (const bad of ['notaurl', 'mysql://u:secret@h/db', 'http://h/db'])
      expect(() => loadConfig(DatabaseConfig, { DATABASE_URL: bad })).toThrow(/Invalid configuration: DATABASE_URL: must be a PostgreSQL URL/);
    expect(() => loadConfig(DatabaseConfig, { DATABASE_URL: 'mysql://u:secret@h/db' })).not.toThrow(/secret/);
    for (const good of ['postgresql://postgres@127.0.0.1:5432/x', 'postgres://u:p@h/db', 'postgresql:///db?host=/var/run/postgresql'])
      expect(loadConfig(DatabaseConfig, { DATABASE_URL: good }).DATABASE_URL).toBe(good);
  });

  it('given an unknown name in RUNPLANE_PARKING_TOOLS or RUNPLANE_TEST_TOOLS, then start-up is refused naming it and the known ones', () => {
    expect(() => loadConfig(ParkingToolsConfig, { RUNPLANE_PARKING_TOOLS: 'ask_human, ask_humans' })).toThrow(
      /RUNPLANE_PARKING_TOOLS: unknown tool name\(s\) ask_humans; the known ones are ask_human, /,
    );
    expect(() => loadConfig(TestToolsConfig, { RUNPLANE_TEST_TOOLS: 'bogus' })).toThrow(/RUNPLANE_TEST_TOOLS: unknown tool name\(s\) bogus/);
    expect(() => loadConfig(ToolsConfig, { RUNPLANE_TEST_TOOLS: 'record_effect,bogus' })).toThrow(
      /RUNPLANE_TEST_TOOLS: unknown tool name\(s\) bogus/,
    );
    expect(loadConfig(ParkingToolsConfig, { RUNPLANE_PARKING_TOOLS: 'ask_human, spawn_subagent,' }).RUNPLANE_PARKING_TOOLS).toBe(
      'ask_human, spawn_subagent,',
    );
    expect(loadConfig(TestToolsConfig, { RUNPLANE_TEST_TOOLS: 'record_effect' }).RUNPLANE_TEST_TOOLS).toBe('record_effect');
    // empty: no parking tool (as documented); unset: the default three
    expect(loadConfig(ParkingToolsConfig, { RUNPLANE_PARKING_TOOLS: '' }).RUNPLANE_PARKING_TOOLS).toBe('');
    expect(loadConfig(ParkingToolsConfig, {}).RUNPLANE_PARKING_TOOLS).toBe('ask_human,spawn_subagent,ask_clarification');
  });

  it('given a model retry backoff whose least is over its most, then start-up is refused naming both', () => {
    expect(() => loadConfig(ModelConfig, { RUNPLANE_MODEL_RETRY_MIN_MS: '50000' })).toThrow(
      /RUNPLANE_MODEL_RETRY_MIN_MS: must be at most RUNPLANE_MODEL_RETRY_MAX_MS \(30000\)/,
    );
    expect(loadConfig(ModelConfig, { RUNPLANE_MODEL_RETRY_MIN_MS: '30000' }).RUNPLANE_MODEL_RETRY_MIN_MS).toBe(30_000);
  });

  it('refuses a tool timeout that is not a positive whole number of milliseconds', () => {
    expect(() => loadConfig(ToolsConfig, { RUNPLANE_TOOL_TIMEOUT_MS: 'abc' })).toThrow(/RUNPLANE_TOOL_TIMEOUT_MS/);
    expect(() => loadConfig(ToolsConfig, { RUNPLANE_TOOL_TIMEOUT_MS: '0' })).toThrow(/RUNPLANE_TOOL_TIMEOUT_MS/);
  });

  it('takes RUNPLANE_NATS_REPLICAS 1 (default) or 3 only, and NATS_URL as one server or a comma-separated cluster', () => {
    expect(loadConfig(BusConfig, {}).RUNPLANE_NATS_REPLICAS).toBe(1);
    expect(loadConfig(BusConfig, { RUNPLANE_NATS_REPLICAS: '3' }).RUNPLANE_NATS_REPLICAS).toBe(3);
    for (const bad of ['2', '0', '5', 'three', '3.0']) {
      expect(() => loadConfig(BusConfig, { RUNPLANE_NATS_REPLICAS: bad })).toThrow(/RUNPLANE_NATS_REPLICAS/);
    }
    expect(natsServerList(' nats://a:4222, nats://b:4222 ,,nats://c:4222')).toEqual(['nats://a:4222', 'nats://b:4222', 'nats://c:4222']);
    expect(() => loadConfig(BusConfig, { NATS_URL: ' , ' })).toThrow(/NATS_URL/);
  });

  it('refuses a subject prefix that would break the subject layout', () => {
    expect(() => loadConfig(BusConfig, { RUNPLANE_SUBJECT_PREFIX: 'rp.x' })).toThrow(/RUNPLANE_SUBJECT_PREFIX/);
  });
});

describe('RUNPLANE_CORS_ORIGINS (the Run viewer calls admission from another origin)', () => {
  it('is empty by default and lists exact origins, trimmed, empty entries dropped', () => {
    expect(loadConfig(CorsConfig, {}).RUNPLANE_CORS_ORIGINS).toEqual([]);
    expect(loadConfig(CorsConfig, { RUNPLANE_CORS_ORIGINS: '' }).RUNPLANE_CORS_ORIGINS).toEqual([]);
    expect(loadConfig(CorsConfig, { RUNPLANE_CORS_ORIGINS: ' http://127.0.0.1:8082, ,https://viewer.example.com ' }).RUNPLANE_CORS_ORIGINS).toEqual([
      'http://127.0.0.1:8082',
      'https://viewer.example.com',
    ]);
  });

  it('refuses what is not an origin: a path, a trailing slash, a wildcard, another scheme', () => {
    for (const bad of ['http://127.0.0.1:8082/viewer', 'http://127.0.0.1:8082/', '*', 'http://*.example.com', 'ftp://example.com', 'example.com']) {
      expect(() => loadConfig(CorsConfig, { RUNPLANE_CORS_ORIGINS: bad })).toThrow(/RUNPLANE_CORS_ORIGINS.*must be an origin/);
    }
  });
});

describe('RUNPLANE_VIEWER_ADMISSION_ORIGINS (the only admission the Run viewer sends the token to)', () => {
  it('is empty by default and lists exact origins in order (the first the default), trimmed', () => {
    expect(loadConfig(ViewerConfig, {}).RUNPLANE_VIEWER_ADMISSION_ORIGINS).toEqual([]);
    expect(
      loadConfig(ViewerConfig, { RUNPLANE_VIEWER_ADMISSION_ORIGINS: ' https://admission.example.com ,http://127.0.0.1:8081' })
        .RUNPLANE_VIEWER_ADMISSION_ORIGINS,
    ).toEqual(['https://admission.example.com', 'http://127.0.0.1:8081']);
  });

  it('refuses what is not an origin (a CSP connect-src entry must not widen to a path, a wildcard or a scheme)', () => {
    for (const bad of [
      'https://admission.example.com/v1',
      'https://admission.example.com/',
      '*',
      'https://*.example.com',
      'https:',
      'admission.example.com',
    ]) {
      expect(() => loadConfig(ViewerConfig, { RUNPLANE_VIEWER_ADMISSION_ORIGINS: bad })).toThrow(
        /RUNPLANE_VIEWER_ADMISSION_ORIGINS.*must be an origin/,
      );
    }
  });
});

describe('RUNPLANE_STARTUP_COLLECTION: on unless set to false, anything else refused naming the variable', () => {
  const collect = (env: Record<string, string>) => loadConfig(MemoryConfig, env).RUNPLANE_STARTUP_COLLECTION;
  it('unset, empty or true: on; false: off', () => {
    expect(collect({})).toBe(true);
    expect(collect({ RUNPLANE_STARTUP_COLLECTION: '' })).toBe(true);
    expect(collect({ RUNPLANE_STARTUP_COLLECTION: 'true' })).toBe(true);
    expect(collect({ RUNPLANE_STARTUP_COLLECTION: 'false' })).toBe(false);
  });
  it('another value is refused, naming the variable', () => {
    expect(() => collect({ RUNPLANE_STARTUP_COLLECTION: 'off' })).toThrow(/Invalid configuration: RUNPLANE_STARTUP_COLLECTION/);
  });
});
