/** The projector service: applies every stored Run event to the PostgreSQL projections (K11). */
export * from './config.js';
export * from './projection-database.js';
export * from './projector.service.js';
export * from './projector.controller.js';
export * from './health.js';
export * from './app.module.js';
export * from './app.js';
