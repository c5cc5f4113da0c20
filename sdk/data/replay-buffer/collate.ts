/**
 * Rows in and out of a storage: a written TensorDict is split into rows along its first batch dimension, and sampled
 * rows are stacked back. A lazy stack (TorchRL's `LazyStackedTensorDict`, densified) accepts rows whose dense leaves
 * differ in their first dimension: such a leaf comes out as a {@link RaggedTensor} (TorchRL's nested tensor).
 */
import { InvalidArgumentError, ShapeMismatchError } from "../../tensordict/errors.js";
import { formatKey, type NestedKey } from "../../tensordict/keys.js";
import { RaggedTensor } from "../../tensordict/ragged.js";
import { formatShape } from "../../tensordict/shape.js";
import { Tensor } from "../../tensordict/tensor.js";
import { TensorDict } from "../../tensordict/tensordict.js";

/** The rows of `td` along its first batch dimension (views sharing its data). */
export function unbindRows(td: TensorDict, where: string): TensorDict[] {
  if (td.batchDims === 0) throw new InvalidArgumentError(`${where}: expected a TensorDict with a batch dimension, got batch size []`);
  return td.unbind(0);
}

/** A stack of rows and the keys of the dense leaves that became ragged because their first dimension differs. */
export interface LazyStack {
  readonly td: TensorDict;
  readonly raggedKeys: readonly NestedKey[];
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** Dense leaf keys whose shapes differ across `rows` (rows of batch size `[]`). */
function heterogeneousKeys(rows: readonly TensorDict[]): NestedKey[] {
  const first = rows[0]!;
  const out: NestedKey[] = [];
  for (const [key, value] of first.entries({ nested: true, leavesOnly: true })) {
    if (!(value instanceof Tensor)) continue;
    const differs = rows.some((row) => {
      const other = row.get(key, undefined);
      return other instanceof Tensor && !sameShape(other.shape, value.shape);
    });
    if (differs) out.push(key);
  }
  return out;
}

/** A dense row leaf of shape `[L, ...tail]` as a one-row ragged tensor (shares its data). */
function asRaggedRow(tensor: Tensor, key: NestedKey, tail: readonly number[]): RaggedTensor {
  if (tensor.shape.length === 0 || !sameShape(tensor.shape.slice(1), tail)) {
    throw new ShapeMismatchError(
      `stack: key ${formatKey(key)} has row shapes ${formatShape(tensor.shape)} and [-1, ${tail.join(", ")}]: rows may differ in the first dimension only`,
      [-1, ...tail],
      tensor.shape,
    );
  }
  return new RaggedTensor(tensor.dtype, tensor.data, Int32Array.of(0, tensor.shape[0]!), tail);
}

/**
 * Stacks rows into one TensorDict of batch size `[n, ...rowBatch]` (copies). With `lazy`, rows of batch size `[]`
 * whose dense leaves differ in their first dimension are allowed: those leaves become ragged. Other mismatches
 * (keys, kinds, dtypes, trailing shapes) throw the TensorDict errors naming the key.
 */
export function lazyStack(rows: readonly TensorDict[], lazy: boolean): LazyStack {
  const first = rows[0];
  if (first === undefined) throw new InvalidArgumentError("stack: needs at least one row");
  if (!lazy || first.batchDims > 0 || rows.length === 1) return { td: TensorDict.stack(rows), raggedKeys: [] };
  const keys = heterogeneousKeys(rows);
  if (keys.length === 0) return { td: TensorDict.stack(rows), raggedKeys: [] };
  const tails = keys.map((key) => first.getTensor(key).shape.slice(1));
  const converted = rows.map((row) => {
    const out = row.exclude();
    keys.forEach((key, k) => {
      const value = row.get(key, undefined);
      if (value instanceof Tensor) out.set(key, asRaggedRow(value, key, tails[k]!));
    });
    return out;
  });
  return { td: TensorDict.stack(converted), raggedKeys: keys };
}

/** Concatenates 1-D TensorDicts along their batch dimension, as a lazy stack of all their rows (see {@link lazyStack}). */
export function lazyCat(tds: readonly TensorDict[]): TensorDict {
  if (tds.length === 1) return tds[0]!.clone();
  try {
    return TensorDict.cat(tds);
  } catch (err) {
    if (!(err instanceof ShapeMismatchError)) throw err;
    return lazyStack(tds.flatMap((td) => td.unbind(0)), true).td;
  }
}
