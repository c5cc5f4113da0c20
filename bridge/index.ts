/**
 * posttrain bridge: the transport layer between TypeScript and the Python workers — ZeroMQ sockets,
 * the envelope protocol, the Arrow codec, worker process supervision. It knows nothing of RL.
 *
 * @module posttrain/bridge
 */
export * from "./errors.js";
export * from "./wire/index.js";
export {
  PROTOCOL_VERSION,
  WorkerInfoSchema,
  type HeartbeatReply,
  type PayloadDescriptor,
  type WorkerInfo,
} from "./protocol/envelope.js";
export type { Payload } from "./protocol/payload.js";
export { MAX_NESTING_DEPTH, type WorkerLimits } from "./protocol/limits.js";
export { RPCChannel, type RequestOptions, type RPCChannelOptions, type RPCReply } from "./protocol/channel.js";
export type { Transport, TransportHandler } from "./transport/transport.js";
export { ZMQDealerTransport, type ZMQCurveClientOptions, type ZMQDealerOptions } from "./transport/zmq.js";
export { InMemoryTransport } from "./transport/memory.js";
export {
  WorkerProcess,
  type SupervisedWorker,
  type WorkerExit,
  type WorkerLogMode,
  type WorkerProcessOptions,
  type WorkerReady,
} from "./worker/process.js";
export { WorkerConnection, type ConnectionOptions, type OpenConnectionOptions } from "./worker/connection.js";
export {
  launchLocalWorkers,
  type LocalDevice,
  type LocalWorkers,
  type LocalWorkersOptions,
} from "./worker/local.js";
export {
  DEFAULT_PLACEMENT_TIMEOUT_MS,
  launchRayWorkers,
  PLACEMENT_STRATEGIES,
  RayAddressSchema,
  RayResourcesSchema,
  type PlacementStrategy,
  type RayNode,
  type RayWorkerEvent,
  type RayWorkerInfo,
  type RayWorkers,
  type RayWorkerSpec,
  type RayWorkersOptions,
} from "./worker/ray.js";
export { packageRoot, resolvePython, setupVenvDir, venvInterpreter, type PythonSearchContext } from "./worker/python.js";
export {
  clientAuth,
  generatePoolKeys,
  workerAuthLine,
  type ConnectionAuth,
  type PoolKeys,
} from "./worker/keys.js";
export * from "./deprecated.js";
