import { Logger } from '@nestjs/common';
import type { EventData, StreamedParagraph } from '@runplane/contracts';
import { EventLog, isTransientNatsError, liveDeltaSubject, ResultStore, traceHeaders } from '@runplane/eventlog';
import { retry } from '@runplane/kit';
import type { RunFacts } from '@runplane/run-facts';
import type { ModelTurnResult } from './decide.js';
import { finalizationInstruction } from './ledger.js';
import { buildMessages, toolDefinitions } from './messages.js';
import type { ModelClient } from './model-client.js';
import { ParagraphRecorder, progressIntervalMs, type StreamProgress } from './paragraphs.js';

/** Records paragraphs finished (and progress made) while a turn streams, through the runtime's decider under the lease (`ParagraphsStreamed`). */
export type RecordStreamed = (paragraphs: StreamedParagraph[], progress: StreamProgress | null) => Promise<void>;

/**
 * The runtime's activity: the one side effect of a Run's execution, a streamed model request
 * through the `openai` client ({@link ModelClient}, under the shared per-model limiter). It decides
 * nothing and appends nothing itself: the Run executor makes a request only when its own
 * `model.turn.requested` was appended (K5, K6), and decides the returned outcome into events.
 * Its request is built from the Run's facts alone (and the stored results they name), so a
 * restarted runtime sends the same material (K3, K10).
 */
export class ModelActivity {
  private readonly logger = new Logger('runtime');
  private results: ResultStore | null = null;

  /**
   * @param log the event log (live deltas are published on its connection; large results are read from its result store).
   * @param model the model client.
   * @param contextMaxChars the bound on one request's messages, characters of JSON (`RUNPLANE_CONTEXT_MAX_CHARS`, K3); unbounded when absent.
   */
  constructor(
    private readonly log: EventLog,
    readonly model: ModelClient,
    private readonly contextMaxChars: number | undefined,
  ) {}

  /**
   * Makes the model request `request` of the Run whose facts are `facts`. Never throws for
   * model-side failures (they come back as `{ok: false}`). Deltas go live to observers (core NATS,
   * never stored); each paragraph finished while the turn streams is handed to `record` (so that
   * publication commits it at once), and text streaming inside one long paragraph is handed over as
   * progress at a bounded rate (K7). All recording is over before this returns, so the turn's own
   * record never races it; an aborted request (`signal`: a stop, a lost lease, a cancel) records
   * nothing more. The stored results the request carries are read first, again through NATS errors
   * until `signal` stops it (then this throws, with the signal aborted).
   */
  async request(facts: RunFacts, request: EventData<'model.turn.requested'>, signal: AbortSignal, record: RecordStreamed): Promise<ModelTurnResult> {
    const runId = facts.runId;
    const turn = request.turn;
    const finalization = request.purpose === 'finalization';
    // The turn is recorded as requested already, and a redelivered wake never calls the model for a
    // turn in flight: a read of the stored results that fails while NATS moves is tried again here
    // (until it answers, or the signal stops the request), not thrown. Thrown, it left the Run with a
    // live holder and a request never sent until the no-progress limit failed it (a trial's rolling restart).
    const results = await retry('transientRead', () => this.resolveResults(facts), {
      signal,
      shouldRetry: ({ error }) => isTransientNatsError(error) && !signal.aborted,
      onFailedAttempt: ({ error, attemptNumber }) => {
        if (isTransientNatsError(error) && !signal.aborted)
          this.logger.warn(
            { runId, turn, attempt: attemptNumber, error: error.message },
            'stored tool results not read yet (NATS); retrying before the model request',
          );
      },
    });
    const messages = buildMessages(facts, results, this.contextMaxChars);
    // the finalization request: no tools, told to answer the original question from what it has (K9)
    if (finalization) messages.push(finalizationInstruction(facts));
    const tools = finalization ? [] : toolDefinitions(facts.admitted!.grant.tools);
    const delta = liveDeltaSubject(this.log.space, runId);
    // every live delta of the turn carries the Run's trace context (`traceparent`, when tracing is on)
    const deltaHeaders = traceHeaders();
    const deltaOpts = deltaHeaders ? { headers: deltaHeaders } : undefined;
    const paragraphs = new ParagraphRecorder(
      record,
      (e) => this.logger.warn({ runId, turn, error: (e as Error).message }, 'a streamed paragraph was not recorded (the turn record keeps its text)'),
      // text streaming inside one long paragraph is recorded as progress well within the no-progress limit (K7)
      { progressIntervalMs: progressIntervalMs(facts.admitted!.limits.noProgressSeconds) },
    );
    try {
      return await this.model.turn(
        turn,
        messages,
        tools,
        (text) => {
          this.log.nc.publish(delta, JSON.stringify({ turn, text }), deltaOpts);
          paragraphs.push(text);
        },
        signal,
        {
          ...(request.maxTokens ? { maxTokens: request.maxTokens } : {}),
          deadlineAt: facts.admitted!.limits.deadlineAt,
          noTools: finalization,
        },
      );
    } finally {
      // a stream that ended keeps every paragraph it finished; an aborted one records nothing more
      await paragraphs.close({ flush: !signal.aborted });
    }
  }

  /**
   * Waits out the shared limiter's rate-limit pause within `deadlineAt`, abortable by `signal`.
   * @returns true when there was a pause to wait out.
   */
  waitForPause(deadlineAt: string | undefined, signal: AbortSignal): Promise<boolean> {
    return this.model.waitForPause(deadlineAt, signal);
  }

  /** Succeeded results of the Run's tool calls by toolCallId: inline ones as recorded, large ones from the result store. */
  async resolveResults(facts: RunFacts): Promise<Map<string, unknown>> {
    const out = new Map<string, unknown>();
    for (const call of facts.toolCalls.values()) {
      const r = call.receipt;
      if (r?.status !== 'succeeded') continue;
      if (r.resultRef) {
        this.results ??= await ResultStore.open(this.log);
        out.set(call.toolCallId, await this.results.get(r.resultRef));
      } else out.set(call.toolCallId, r.result);
    }
    return out;
  }
}
