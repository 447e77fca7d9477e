/**
 * Imported first by each service's `main.ts`, before anything loads `@nestjs/common`: defers the
 * `Intl.DateTimeFormat`s made while the modules load until their first use, so ICU's locale data
 * stays unmapped in an idle service; `startService` restores the original (locale-data.ts).
 */
import { deferDateTimeFormat } from './locale-data.js';

deferDateTimeFormat();
