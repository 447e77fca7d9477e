// moved to @runplane/kit beside the KV store base that uses it; re-exported so imports of the log keep working
export { kvJson } from '@runplane/kit';
