/**
 * Reading numbers out of leaves, and reducing them to one value per row or per trajectory (internal).
 */
import { LeafKindMismatchError } from "../../tensordict/errors.js";
import { keyPath, type NestedKey } from "../../tensordict/keys.js";
import { RaggedTensor } from "../../tensordict/ragged.js";
import { prod } from "../../tensordict/shape.js";
import { view } from "../../tensordict/storage.js";
import { Tensor } from "../../tensordict/tensor.js";
import { kindOf, type TensorDict } from "../../tensordict/tensordict.js";

/** How several numbers become one: TorchRL's reductions (`median` is the lower median, as `torch.median`). */
export type Reduction = "sum" | "mean" | "max" | "min" | "median";

/** Reduces `values` (non-empty) with `reduction`. */
export function reduce(values: ArrayLike<number>, reduction: Reduction): number {
  const n = values.length;
  switch (reduction) {
    case "sum":
    case "mean": {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += values[i]!;
      return reduction === "sum" ? sum : sum / n;
    }
    case "max": {
      let max = -Infinity;
      for (let i = 0; i < n; i++) max = Math.max(max, values[i]!);
      return max;
    }
    case "min": {
      let min = Infinity;
      for (let i = 0; i < n; i++) min = Math.min(min, values[i]!);
      return min;
    }
    case "median": {
      const sorted = Float64Array.from(values).sort();
      return sorted[Math.floor((n - 1) / 2)]!;
    }
  }
}

/** The numbers of a dense or ragged leaf (all rows), as float64; throws KEY_NOT_FOUND or LEAF_KIND_MISMATCH. */
export function leafNumbers(td: TensorDict, key: NestedKey, op: string): Float64Array {
  const value = td.get(key);
  if (value instanceof Tensor) return Float64Array.from(value.toNumbers());
  if (value instanceof RaggedTensor) {
    const start = value.offsets[0]!;
    const end = value.offsets[value.rows]!;
    const tail = prod(value.tailShape);
    const flat = new Tensor(value.dtype, [(end - start) * tail], view(value.values, start * tail, end * tail));
    return Float64Array.from(flat.toNumbers());
  }
  throw new LeafKindMismatchError(keyPath(key).length === 1 ? keyPath(key)[0]! : keyPath(key), "tensor", kindOf(value), op);
}
