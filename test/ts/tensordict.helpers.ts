// Shared helpers of the tensordict test suites.
import { expect } from "vitest";
import { PosttrainError, RaggedTensor, Tensor, TensorDict, kindOf, type NestedKey } from "../../sdk/tensordict/index.js";

/**
 * A plain, comparable picture of a TensorDict: batch size, and per key its kind, dtype, shape and values (a value of a
 * registered leaf type, such as a HistoryBatch, by its JSON form). Loads no leaf type itself, so suites that do not
 * import `sdk/data` run TensorDict without History.
 */
export function snapshot(td: TensorDict): unknown {
  const leaves: Record<string, unknown> = {};
  for (const [key, value] of td.entries({ nested: true })) {
    const name = typeof key === "string" ? key : key.join(".");
    if (value instanceof Tensor) leaves[name] = { kind: "tensor", dtype: value.dtype, shape: value.shape, values: value.toArray() };
    else if (value instanceof RaggedTensor) {
      leaves[name] = { kind: "ragged", dtype: value.dtype, tailShape: value.tailShape, rows: value.toArray() };
    } else if (value instanceof TensorDict) leaves[name] = { kind: "tensordict", batchSize: value.batchSize };
    else if (Array.isArray(value)) leaves[name] = { kind: "strings", values: [...(value as readonly string[])] };
    else leaves[name] = { kind: kindOf(value), json: JSON.parse(JSON.stringify(value)) as unknown };
  }
  return { batchSize: td.batchSize, keys: td.keys({ nested: true }), leaves };
}

/** Runs `fn`, expects it to throw an error of `cls` with `code`, and returns the error for more checks. */
export function expectError<E extends PosttrainError>(
  fn: () => unknown,
  cls: abstract new (...args: never[]) => E,
  code: string,
): E {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(cls);
  expect(caught).toBeInstanceOf(PosttrainError);
  const err = caught as E;
  expect(err.code).toBe(code);
  return err;
}

/** An int64 ragged tensor from plain rows. */
export function ragged(rows: readonly (readonly number[])[]): RaggedTensor<"int64"> {
  const offsets = new Int32Array(rows.length + 1);
  rows.forEach((r, i) => (offsets[i + 1] = offsets[i]! + r.length));
  return new RaggedTensor("int64", BigInt64Array.from(rows.flat(), (v) => BigInt(v)), offsets);
}

/** A TensorDict of batch size `[n]` with one leaf of each kind and a nested key. */
export function sample(n: number, seed = 0): TensorDict {
  return new TensorDict(
    {
      obs: Tensor.from(Float32Array.from({ length: n * 2 }, (_, i) => seed + i), { dtype: "float32", shape: [n, 2] }),
      tokens: ragged(Array.from({ length: n }, (_, i) => Array.from({ length: i % 3 }, (_, j) => seed * 100 + i * 10 + j))),
      text: Array.from({ length: n }, (_, i) => `s${seed}-${i}`),
      next: { reward: Tensor.from(Array.from({ length: n }, (_, i) => seed + i / 2), { dtype: "float64" }) },
    },
    { batchSize: [n] },
  );
}

/** The keys of a TensorDict written as dotted strings, for compact assertions. */
export function dotted(keys: readonly NestedKey[]): string[] {
  return keys.map((k) => (typeof k === "string" ? k : k.join(".")));
}
