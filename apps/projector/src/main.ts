/**
 * Process entry of the projector, through the shared bootstrap: prints one line
 * `projector ready on <url>` to stdout when it serves; SIGTERM/SIGINT stop the consumer
 * (in-flight steps finish), close NATS and PostgreSQL and exit 0. A start-up failure prints one
 * line to stderr and exits 1.
 */
// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import { main } from '@runplane/service-kit';
import { projectorService } from './app.js';

main(projectorService);
