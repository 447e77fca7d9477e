export * from './config.js';
export * from './notifier.js';
