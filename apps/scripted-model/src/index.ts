/**
 * @runplane/app-scripted-model: an OpenAI-compatible scripted model server for tests and the
 * offline demo, and the deterministic research policy it answers with.
 */
export {
  startScriptedModel,
  requestKey,
  SCENARIO_KEY_HEADER,
  type ScriptedModel,
  type ScriptedModelOptions,
  type ScriptedModelStats,
} from './server.js';
export {
  Scenario,
  ScenarioStep,
  ScenarioReply,
  ScenarioError,
  ScenarioToolCall,
  ScenarioUsage,
  ScenarioFileError,
  parseScenario,
  loadScenarioFile,
  type ScenarioInput,
} from './scenario.js';
export { researchPolicy, writeAnswer } from './research-policy.js';
export { currentRequest, currentTurnCalls, earlierRequest, lastQuestion, type CallOutcome, type CallRecord } from './conversation.js';
export { askedSecurities, asksOutsideTheData, followUp, mentionedFunds, mentionedDates, questionParts, STOP_WORDS, topN } from './question.js';
export { closestPair, chooseFiles, APPROXIMATE_AFTER_DAYS, type Subject } from './file-choice.js';
export { planResearch, questionPlan, MAX_COMPARED_FUNDS } from './plan.js';
export { readQuestionDates, questionDates, isoDay, type QuestionDate, type UnreadableDate } from './question-dates.js';
export {
  ChatCompletionRequest,
  WireMessage,
  WireTool,
  WireToolCall,
  estimateTokens,
  toolPairingError,
  type Reply,
  type ReplyToolCall,
  type FinishReason,
  type UsageOverride,
} from './wire.js';
/** The unanswered-block helpers live in the contracts (one definition for the product); re-exported for the policy's users. */
export { extractUnanswered, UNANSWERED_FENCE, type UnansweredPart } from '@runplane/contracts';
