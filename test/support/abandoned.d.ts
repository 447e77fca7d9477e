/** Types of test/support/abandoned.js (plain JavaScript: the global set-up loads it untransformed). */
export declare const ABANDONED_AFTER_H: number;
export declare const TEST_DATABASE: RegExp;
export declare const TEST_FOLDER: RegExp;
export declare function dropAbandonedDatabases(url: string, opts?: { olderThanH?: number; pattern?: RegExp }): Promise<string[]>;
export declare function removeAbandonedFolders(dir: string, opts?: { olderThanH?: number; pattern?: RegExp }): string[];
