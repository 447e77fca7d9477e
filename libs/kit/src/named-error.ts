/**
 * An Error whose `name` is its class's own name, so a domain error needs no line of its own to
 * say what it is: `class WaitConflict extends NamedError {}` logs and prints as `WaitConflict`.
 * No dependencies (a pure decider may throw it): import it as `@runplane/kit/named-error`.
 */
export class NamedError extends Error {
  override readonly name: string = this.constructor.name;
}
