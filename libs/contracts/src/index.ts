export * from './tools.js';
export * from './events.js';
export * from './factory.js';
export * from './http.js';
export * from './config.js';
export * from './catalog-doc.js';
export * from './openapi.js';
export * from './passages.js';
