/**
 * Old names of `posttrain/envs`, kept for one release so that code written against them still compiles and runs;
 * each is the renamed export under its old name (CHANGELOG.md, "Renamed").
 */
import { extractGSM8KAnswer, normalizeGSM8KAnswer, type GSM8KScoreOptions } from "./tasks/gsm8k.js";

/** @deprecated Renamed `extractGSM8KAnswer`. */
export const extractGsm8kAnswer = extractGSM8KAnswer;
/** @deprecated Renamed `normalizeGSM8KAnswer`. */
export const normalizeGsm8kAnswer = normalizeGSM8KAnswer;
/** @deprecated Renamed `GSM8KScoreOptions`. */
export type Gsm8kScoreOptions = GSM8KScoreOptions;
