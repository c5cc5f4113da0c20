/**
 * Old names of `posttrain/objectives`, kept for one release so that code written against them still compiles;
 * each is the renamed export under its old name (CHANGELOG.md, "Renamed").
 */
import type { SFTLossFunction, TRLLossType } from "./losses.js";

/** @deprecated Renamed `SFTLossFunction`. */
export type SftLossFunction = SFTLossFunction;
/** @deprecated Renamed `TRLLossType`. */
export type TrlLossType = TRLLossType;
