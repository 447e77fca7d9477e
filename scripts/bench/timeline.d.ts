// Types of the bench's timeline helpers a test imports (scripts/bench/timeline.js is plain JavaScript).

/** One pair of consecutive event types: how often per Run, its median gap (ms), its share of the summed spans (0..1). */
export interface TimelineRow {
  from: string;
  to: string;
  perRun: number;
  medianMs: number;
  share: number;
}

export function storedMs(timestamp: string): number;
export function timelineOf(runs: { type: string; ms: number }[][]): { spanMs: number; rows: TimelineRow[] };
export function readTimeline(log: unknown, runIds: string[]): Promise<{ spanMs: number; rows: TimelineRow[] }>;
