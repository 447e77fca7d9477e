/**
 * The only path to the model: the `openai` client, chat completions with tools, streaming.
 * The client's own retries are off (`maxRetries: 0`): one layer retries, and it is not this one
 * (K7). Errors are classified for the `model.turn.failed` fact.
 */
import OpenAI from 'openai';
import type { ModelTurnResult } from './decide.js';

export interface ModelClientOptions {
  baseURL: string;
  apiKey: string;
  model: string;
  /** Per request, milliseconds. */
  timeoutMs: number;
}

/** Makes a model-chosen tool call id safe as a Runplane id and unique within the Run. */
export function runToolCallId(turn: number, index: number, raw: string | undefined): string {
  const clean = (raw ?? '').replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 80);
  return `t${turn}-${index}-${clean || 'call'}`;
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
   * One streamed chat completion. Content deltas are passed to `onDelta` as they arrive (for
   * live observers; they are not facts). Never throws for model-side failures: returns them.
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
      let content = '';
      let finishReason = '';
      let usage: Extract<ModelTurnResult, { ok: true }>['turn']['usage'] = null;
      const calls = new Map<number, { id?: string; name: string; args: string }>();
      for await (const chunk of stream) {
        if (chunk.usage) {
          usage = {
            promptTokens: chunk.usage.prompt_tokens,
            completionTokens: chunk.usage.completion_tokens,
            totalTokens: chunk.usage.total_tokens,
          };
        }
        for (const choice of chunk.choices) {
          const d = choice.delta;
          if (d?.content) {
            content += d.content;
            onDelta(d.content);
          }
          for (const tc of d?.tool_calls ?? []) {
            const slot = calls.get(tc.index) ?? { name: '', args: '' };
            if (tc.id) slot.id = tc.id;
            if (tc.function?.name) slot.name += tc.function.name;
            if (tc.function?.arguments) slot.args += tc.function.arguments;
            calls.set(tc.index, slot);
          }
          if (choice.finish_reason) finishReason = choice.finish_reason;
        }
      }
      if (!finishReason) return { ok: false, error: { kind: 'invalid-response', status: null, message: 'stream ended without a finish reason' } };
      const toolCalls = [...calls.entries()]
        .sort(([a], [b]) => a - b)
        .map(([index, c]) => ({ toolCallId: runToolCallId(turnNo, index, c.id), name: c.name, argumentsText: c.args }));
      return { ok: true, turn: { content, toolCalls, finishReason, usage } };
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
