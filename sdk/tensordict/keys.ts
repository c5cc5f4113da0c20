/**
 * Keys of a TensorDict: a top-level key is a string, a nested key is a tuple of strings
 * (`["next", "reward"]`), as in TorchRL.
 */
import { InvalidArgumentError } from "./errors.js";

/** A key: `"obs"` for a top-level entry, `["next", "reward"]` for a nested one. `["obs"]` is the same as `"obs"`. */
export type NestedKey = string | readonly string[];

/** The path of a key as a non-empty tuple of strings; throws INVALID_ARGUMENT for an empty tuple or a non-string part. */
export function keyPath(key: NestedKey): readonly string[] {
  if (typeof key === "string") return [key];
  const parts: unknown = key;
  if (!Array.isArray(parts) || parts.length === 0) {
    throw new InvalidArgumentError(`a key must be a string or a non-empty array of strings, got ${JSON.stringify(key)}`);
  }
  for (const part of parts as unknown[]) {
    if (typeof part !== "string") {
      throw new InvalidArgumentError(`a nested key must hold strings only, got ${JSON.stringify(key)}`);
    }
  }
  return key;
}

/**
 * The canonical form of a key path: a plain string for a top-level key, a tuple for a nested one
 * (the form {@link TensorDict.keys} returns).
 */
export function canonicalKey(path: readonly string[]): NestedKey {
  return path.length === 1 ? path[0]! : Object.freeze(path.slice());
}

/** A key as written in messages: `"obs"` or `["next","reward"]`. */
export function formatKey(key: NestedKey): string {
  const path = typeof key === "string" ? [key] : key;
  return path.length === 1 ? JSON.stringify(path[0]) : JSON.stringify(path);
}
