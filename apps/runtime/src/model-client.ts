/**
 * The only path to the model: the `openai` client, chat completions with tools, streaming.
 * The client's own retries are off (`maxRetries: 0`): one layer retries, and it is not this one
 * (K7). Errors are classified for the `model.turn.failed` fact.
 */
import OpenAI from 'openai';
import type { ModelTurnResult } from './decide.js';
import { TurnAssembler } from './turn-assembly.js';

export interface ModelClientOptions {
  baseURL: string;
  apiKey: string;
  model: string;
  /** Per request, milliseconds. */
  timeoutMs: number;
}

export class ModelClient {
  private readonly client: OpenAI;

  constructor(private readonly opts: ModelClientOptions) {
    this.client = new OpenAI({ baseURL: opts.baseURL, apiKey: opts.apiKey, maxRetries: 0, timeout: opts.timeoutMs });
  }

  get model(): string {
    return this.opts.model;
  }

  /**
   * One streamed chat completion, assembled by {@link TurnAssembler} into exactly the calls the
   * model made. Content deltas are passed to `onDelta` as they arrive (for live observers; they
   * are not facts). Never throws for model-side failures: returns them (a malformed stream is an
   * `invalid-response` failure).
   */
  async turn(
    turnNo: number,
    messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[],
    tools: OpenAI.Chat.Completions.ChatCompletionTool[],
    onDelta: (text: string) => void,
    signal?: AbortSignal,
  ): Promise<ModelTurnResult> {
    try {
      const stream = await this.client.chat.completions.create(
        {
          model: this.opts.model,
          messages,
          ...(tools.length > 0 ? { tools } : {}),
          stream: true,
          stream_options: { include_usage: true },
        },
        signal ? { signal } : undefined,
      );
      const assembler = new TurnAssembler();
      for await (const chunk of stream) {
        const text = assembler.push(chunk);
        if (text) onDelta(text);
      }
      return assembler.result(turnNo);
    } catch (e) {
      return { ok: false, error: classify(e) };
    }
  }
}

/** Maps an openai client error to the recorded failure kind. */
export function classify(e: unknown): Extract<ModelTurnResult, { ok: false }>['error'] {
  if (e instanceof OpenAI.APIConnectionTimeoutError) return { kind: 'timeout', status: null, message: e.message };
  if (e instanceof OpenAI.APIConnectionError) return { kind: 'connection', status: null, message: e.message };
  if (e instanceof OpenAI.APIError) return { kind: 'http', status: typeof e.status === 'number' ? e.status : null, message: e.message };
  return { kind: 'invalid-response', status: null, message: e instanceof Error ? e.message : String(e) };
}
