/**
 * Old names of `posttrain/bridge`, kept for one release so that code written against them still compiles and runs;
 * each is the renamed export under its old name (CHANGELOG.md, "Renamed").
 */
import { RPCChannel, type RPCChannelOptions, type RPCReply } from "./protocol/channel.js";
import { ZMQDealerTransport, type ZMQDealerOptions } from "./transport/zmq.js";

/** @deprecated Renamed `RPCChannel`. */
export const RpcChannel = RPCChannel;
/** @deprecated Renamed `RPCChannel`. */
export type RpcChannel = RPCChannel;
/** @deprecated Renamed `RPCChannelOptions`. */
export type RpcChannelOptions = RPCChannelOptions;
/** @deprecated Renamed `RPCReply`. */
export type RpcReply = RPCReply;
/** @deprecated Renamed `ZMQDealerTransport`. */
export const ZmqDealerTransport = ZMQDealerTransport;
/** @deprecated Renamed `ZMQDealerTransport`. */
export type ZmqDealerTransport = ZMQDealerTransport;
/** @deprecated Renamed `ZMQDealerOptions`. */
export type ZmqDealerOptions = ZMQDealerOptions;
