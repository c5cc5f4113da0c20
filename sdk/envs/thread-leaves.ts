/**
 * TensorDicts across `worker_threads` (ParallelEnv): the dense leaves as typed arrays moved with the message
 * (transferred, not copied and not JSON), with their nested keys, dtypes and shapes.
 */
import { z } from "zod";
import { parseOptions } from "../core/index.js";
import { DTYPES, Tensor, TensorDict, type AnyTypedArray, type DType } from "../tensordict/index.js";
import { InvalidArgumentError } from "./errors.js";

/** One dense leaf: its key path, dtype, full shape and row-major data. */
export interface PackedLeaf {
  readonly key: readonly string[];
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly data: AnyTypedArray;
}

const PackedLeafSchema = z.strictObject({
  key: z.array(z.string()).min(1),
  dtype: z.enum(DTYPES as unknown as [DType, ...DType[]]),
  shape: z.array(z.number().int().nonnegative()),
  data: z.custom<AnyTypedArray>((v) => ArrayBuffer.isView(v) && !(v instanceof DataView), "a typed array"),
});

/** The leaves of a message, checked. */
export const PackedLeavesSchema = z.array(PackedLeafSchema);

/**
 * The dense leaves of `td`, each copied into a buffer of its own, and those buffers (the transfer list of
 * `postMessage`). A leaf that is not a dense tensor (ragged, strings) cannot cross: INVALID_ARGUMENT naming it.
 */
export function packLeaves(td: TensorDict, where: string): { leaves: PackedLeaf[]; transfer: ArrayBuffer[] } {
  const leaves: PackedLeaf[] = [];
  const transfer: ArrayBuffer[] = [];
  for (const [key, value] of td.entries({ nested: true, leavesOnly: true })) {
    const path = typeof key === "string" ? [key] : [...key];
    if (!(value instanceof Tensor)) throw new InvalidArgumentError(`${where}: ${JSON.stringify(path.join("."))} is not a dense tensor; only dense tensors cross threads`);
    const data = value.data.slice() as AnyTypedArray;
    leaves.push({ key: path, dtype: value.dtype, shape: [...value.shape], data });
    transfer.push(data.buffer as ArrayBuffer);
  }
  return { leaves, transfer };
}

/** The TensorDict of batch size `batchSize` holding `leaves` (checked; the arrays are used without copying). */
export function unpackLeaves(leaves: unknown, batchSize: readonly number[], where: string): TensorDict {
  const checked = parseOptions(PackedLeavesSchema, leaves, where);
  const td = new TensorDict({}, { batchSize });
  for (const leaf of checked) td.set(leaf.key, new Tensor(leaf.dtype, leaf.shape, leaf.data));
  return td;
}
