/**
 * Recovery's wiring: Nest builds one command handler for the service (one fold cache), and its
 * lease watcher, deadline watcher and both adapters decide through that one; the event log is
 * connected from the injected bus settings (not from `process.env`). On a real nats-server.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BusConfig, LeaseConfig, RecoveryConfig } from '@runplane/contracts';
import { EventLog, HeartbeatStore, LeaseStore } from '@runplane/eventlog';
import { ConfigModule, RunCommandHandler } from '@runplane/service-kit';
import { CancelController } from '../src/cancel.controller.js';
import { ClosingController } from '../src/closing.controller.js';
import { DeadlineStore } from '../src/deadlines.js';
import { DeadlineWatcher } from '../src/deadline-watcher.service.js';
import { LeaseWatcher } from '../src/lease-watcher.service.js';
import { RecoveryModule } from '../src/recovery.module.js';
import { SHARED_NATS, suiteNatsEnv } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
const env = { ...suiteNatsEnv(), RUNPLANE_STREAM: `RPTEST_WIRING_${tag}`, RUNPLANE_SUBJECT_PREFIX: `twir${tag}` };

/** The command handler a class decides through (a private field, read the same way in each). */
const commandsOf = (o: unknown) => (o as { commands: RunCommandHandler }).commands;

describe('recovery: one command handler, one fold cache', () => {
  let app: INestApplicationContext;
  beforeAll(async () => {
    @Module({ imports: [ConfigModule.forRoot([BusConfig, LeaseConfig, RecoveryConfig], env), RecoveryModule] })
    class TestRoot {}
    app = await NestFactory.createApplicationContext(TestRoot, { logger: false });
  });
  afterAll(async () => {
    await app?.close();
    const log = await EventLog.connect({ ...SHARED_NATS, stream: env.RUNPLANE_STREAM, prefix: env.RUNPLANE_SUBJECT_PREFIX });
    for (const store of [await LeaseStore.open(log), await HeartbeatStore.open(log), await DeadlineStore.open(log)]) await store.destroy();
    await log.destroyStream();
    await log.close();
  });

  it('given the recovery module, then its watchers and adapters share the one handler (owner recovery) and its folds', () => {
    const handler = app.get(RunCommandHandler);
    expect(handler.owner).toBe('recovery');
    const users = [app.get(LeaseWatcher), app.get(DeadlineWatcher), app.get(CancelController), app.get(ClosingController)];
    for (const user of users) expect(commandsOf(user)).toBe(handler);
    expect(new Set(users.map((u) => commandsOf(u).folds)).size).toBe(1);
  });

  it('given bus settings passed to the configuration, then the event log is connected with them', () => {
    const log = app.get(EventLog);
    expect(log.space.stream).toBe(env.RUNPLANE_STREAM);
    expect(process.env['RUNPLANE_STREAM']).not.toBe(env.RUNPLANE_STREAM);
  });
});
