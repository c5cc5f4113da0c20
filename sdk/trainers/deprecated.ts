/**
 * Old names of `posttrain/trainers`, kept for one release so that code written against them still compiles and
 * runs; each is the renamed export under its old name (CHANGELOG.md, "Renamed").
 */
import { ZMQWeightSyncOptionsSchema, ZMQWeightSyncScheme, type ZMQWeightSyncOptions } from "./weight-sync.js";

/** @deprecated Renamed `ZMQWeightSyncScheme`. */
export const ZmqWeightSyncScheme = ZMQWeightSyncScheme;
/** @deprecated Renamed `ZMQWeightSyncScheme`. */
export type ZmqWeightSyncScheme = ZMQWeightSyncScheme;
/** @deprecated Renamed `ZMQWeightSyncOptionsSchema`. */
export const ZmqWeightSyncOptionsSchema = ZMQWeightSyncOptionsSchema;
/** @deprecated Renamed `ZMQWeightSyncOptions`. */
export type ZmqWeightSyncOptions = ZMQWeightSyncOptions;
