/**
 * posttrain: a typed TypeScript SDK for LLM post-training whose tensor compute runs in Python/PyTorch
 * workers. This entry point re-exports the public API; the transport layer is also available as
 * `posttrain/bridge`.
 *
 * @module posttrain
 */
export * from "./tensordict/index.js";
export * from "./data/index.js";
export * from "./workers/index.js";
export * from "./models/index.js";
export * from "./modules/index.js";
export * from "./collectors/index.js";
export * from "./envs/index.js";
export * from "./objectives/index.js";
export * from "./trainers/index.js";
export * from "./runs/index.js";
export {
  ConnectionClosedError,
  InvalidArgumentError,
  PayloadTooLargeError,
  PlacementError,
  PosttrainError,
  ProtocolError,
  RayDriverError,
  RayUnavailableError,
  RequestAbortedError,
  RequestTimeoutError,
  WireFormatError,
  WorkerDiedError,
  WorkerError,
  WorkerHungError,
  WorkerOverloadedError,
  WorkerStartError,
  WorkerUnresponsiveError,
  PROTOCOL_VERSION,
  type LocalDevice,
  type PlacementStrategy,
  type RayDriverErrorCode,
  type RayWorkerEvent,
  type RayWorkerInfo,
  type RayWorkerSpec,
  type RequestOptions,
  type WorkerErrorCode,
  type WorkerInfo,
} from "../bridge/index.js";
