/** Test fixture: admission's commands with the values most specs use, each field overridable. */
import type { PostMessage } from '@runplane/app-admission';

/** A `PostMessage` of `client-1` in `conv-1` asking "Compare SPY and QQQ" (list_funds, 4 requests, 4 calls, 60 s), then `over`. */
export const postMessage = (over: Partial<PostMessage> = {}): PostMessage => ({
  type: 'PostMessage',
  conversationId: 'conv-1',
  clientMessageId: 'client-1',
  content: 'Compare SPY and QQQ',
  grant: { tools: ['list_funds'], model: 'm' },
  limits: { maxModelRequests: 4, maxToolCalls: 4, deadlineSeconds: 60 },
  requestId: 'req-1',
  ...over,
});
