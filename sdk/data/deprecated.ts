/**
 * Old names of `posttrain/data`, kept for one release so that code written against them still compiles and runs;
 * each is the renamed export under its old name (CHANGELOG.md, "Renamed").
 */
import type { JSONObject as JSONObjectType, JSONValue as JSONValueType } from "../core/json.js";
import { SeededRNG as SeededRNGClass } from "./replay-buffer/rng.js";

/** @deprecated Renamed `JSONValue`. */
export type JsonValue = JSONValueType;
/** @deprecated Renamed `JSONObject`. */
export type JsonObject = JSONObjectType;
/** @deprecated Renamed `SeededRNG`. */
export const SeededRng = SeededRNGClass;
/** @deprecated Renamed `SeededRNG`. */
export type SeededRng = SeededRNGClass;
