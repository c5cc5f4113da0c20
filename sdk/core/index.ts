/**
 * The SDK's floor: validation (`parseOptions`, `parseReply`) and the error base classes. Every SDK folder may import
 * it; it imports nothing of the SDK (only the bridge's error and reply types).
 */
export { InvalidArgumentError, PosttrainError, ProtocolError } from "./errors.js";
export { fieldProblems, parseOptions, parseReply, type FieldProblem } from "./validation.js";
export { JSONValueSchema, type JSONObject, type JSONValue } from "./json.js";
