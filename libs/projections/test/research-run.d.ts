/** Types of research-run.js (see there). */
import type { EventContext, RunEvent, RunEventOf } from '@runplane/contracts';

/** The envelope context of Run `runId`: conversation `conv-<runId>`, message `msg-<runId>`. */
export declare const ctxOf: (runId: string, conversationId?: string) => EventContext;
/** `base` + `seconds`, as a Date (event times are fixed so rows are predictable). */
export declare const at: (seconds: number, base?: number) => Date;
/** The research Run's `run.admitted` (its question `content`, at `t` seconds). */
export declare function admittedEvent(runId: string, content?: string, t?: number): RunEventOf<'run.admitted'>;
/**
 * A complete research Run: two model turns, two tool calls (one succeeds by reference, one
 * fails), two passages (one revised), the answer published and the Run settled `completed`.
 */
export declare function researchRunEvents(runId: string): RunEvent[];
