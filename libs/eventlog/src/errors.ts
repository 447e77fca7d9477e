/**
 * The append was rejected because the writer's view of its subject is stale: another write
 * landed first (JetStream API code 10071, "wrong last sequence"). The writer must re-read the
 * Run's events and decide again; it must not retry the same append blindly (K6).
 */
export class AppendConflict extends Error {
  constructor(
    readonly subject: string,
    readonly expectedLastSubjectSeq: number,
    detail: string,
  ) {
    super(`append to ${subject} conflicted (expected last subject sequence ${expectedLastSubjectSeq}): ${detail}`);
    this.name = 'AppendConflict';
  }
}

/** A message on a Run subject that is not a valid Runplane event (wrong schema, owner or subject). */
export class InvalidStoredEvent extends Error {
  constructor(
    readonly seq: number,
    readonly subject: string,
    detail: string,
  ) {
    super(`stream message ${seq} on ${subject} is not a valid event: ${detail}`);
    this.name = 'InvalidStoredEvent';
  }
}
