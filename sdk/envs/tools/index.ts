/**
 * Tools for chat environments (TorchRL's tool transforms): the Python sandbox, tool-call parsing, and the
 * transforms `PythonInterpreter`, `SimpleToolTransform` and `MCPToolTransform`. See docs/tools.md.
 */
export { MCPConnectionError, SandboxClosedError, SandboxStartError, SandboxUnavailableError } from "./errors.js";
export {
  extractPythonBlocks,
  hasToolCall,
  parseToolCalls,
  type MalformedToolCall,
  type ParsedToolCall,
  type ToolCallFormat,
  type ToolCallMatch,
  type ToolCallParser,
} from "./parse.js";
export {
  PythonSandbox,
  sandboxDriverPath,
  type LimitsApplied,
  type SandboxInfo,
  type SandboxIsolation,
  type SandboxResult,
  type SandboxRunOptions,
  type SandboxStatus,
} from "./sandbox.js";
export { PythonSandboxOptionsSchema, type PythonSandboxOptions, type ResolvedSandboxOptions } from "./sandbox-options.js";
export { sandboxSupport, type SandboxSupport } from "./sandbox-support.js";
export { ToolTransformBase, ToolTransformOptionsSchema, type ToolCallOptions, type ToolRunOptions, type ToolTransformOptions } from "./tool-transform.js";
export { PythonInterpreter, PythonInterpreterOptionsSchema, type PythonInterpreterOptions } from "./python-interpreter.js";
export {
  SimpleToolTransform,
  SimpleToolTransformOptionsSchema,
  type SimpleTool,
  type SimpleToolContext,
  type SimpleToolTransformOptions,
  type ToolSpec,
} from "./simple-tool-transform.js";
export { MCPToolTransform, MCPToolTransformOptionsSchema, type MCPToolSpec, type MCPToolTransformOptions } from "./mcp-tool-transform.js";
export { ToolEpisodeEnd, ToolEpisodeEndOptionsSchema, type ToolEpisodeEndOptions } from "./tool-episode-end.js";
