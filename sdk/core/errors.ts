/**
 * The error base classes every SDK folder throws from: each error is a {@link PosttrainError} with a stable `code`.
 * They are defined by the bridge (the floor of the project, which cannot import the SDK) and re-exported here, so
 * SDK code imports its errors from `sdk/core` and never reaches into the bridge for them.
 */
export { InvalidArgumentError, PosttrainError, ProtocolError } from "../../bridge/errors.js";
