/**
 * Per-row helpers shared by environments and transforms: done flags (`[...batch, 1]` bool, TorchRL's shape),
 * reward columns (`[...batch, 1]` float32), and merging the rows of a partial reset.
 */
import {
  RaggedTensor,
  Tensor,
  TensorDict,
  kindOf,
  type NestedKey,
  type TensorDictValue,
} from "../tensordict/index.js";
import { DONE_KEY, TERMINATED_KEY, TRUNCATED_KEY } from "./keys.js";

/** A `[...batchSize, 1]` bool tensor holding `values` (one per row, row-major), or all false. */
export function flagColumn(batchSize: readonly number[], values?: readonly boolean[]): Tensor<"bool"> {
  const t = Tensor.zeros("bool", [...batchSize, 1]);
  if (values !== undefined) values.forEach((v, i) => (t.data[i] = v ? 1 : 0));
  return t;
}

/** A `[...batchSize, 1]` float32 tensor holding `values` (one per row, row-major). */
export function rewardColumn(batchSize: readonly number[], values: readonly number[]): Tensor<"float32"> {
  return new Tensor("float32", [...batchSize, 1], Float32Array.from(values));
}

/**
 * One boolean per row from a flag leaf (`[...batch, 1]` or `[...batch]`, any dtype: non-zero is true); all false
 * when `key` is absent.
 */
export function readFlags(td: TensorDict, key: NestedKey): boolean[] {
  const rows = td.numel();
  const value = td.get(key, undefined);
  if (value === undefined) return new Array<boolean>(rows).fill(false);
  const t = td.getTensor(key);
  const per = t.numel() / Math.max(rows, 1);
  const nums = t.toNumbers();
  return Array.from({ length: rows }, (_, r) => nums.slice(r * per, (r + 1) * per).some((v) => v !== 0));
}

/** One number per row from a `[...batch, 1]` or `[...batch]` tensor leaf (`undefined` when `key` is absent). */
export function readColumn(td: TensorDict, key: NestedKey): number[] | undefined {
  if (!td.has(key)) return undefined;
  const t = td.getTensor(key);
  const rows = td.numel();
  const per = t.numel() / Math.max(rows, 1);
  const nums = t.toNumbers();
  return Array.from({ length: rows }, (_, r) => nums[r * per] ?? 0);
}

/**
 * Makes `td`'s done keys consistent, in place: missing `terminated` / `truncated` become false (or, when only
 * `done` is there, `terminated` copies it), and `done` becomes `done || terminated || truncated`.
 */
export function completeDoneKeys(td: TensorDict): TensorDict {
  const done = readFlags(td, DONE_KEY);
  const hasTerminated = td.has(TERMINATED_KEY);
  const terminated = hasTerminated ? readFlags(td, TERMINATED_KEY) : done.slice();
  const truncated = readFlags(td, TRUNCATED_KEY);
  td.set(TERMINATED_KEY, flagColumn(td.batchSize, terminated));
  td.set(TRUNCATED_KEY, flagColumn(td.batchSize, truncated));
  td.set(DONE_KEY, flagColumn(td.batchSize, done.map((d, i) => d || terminated[i]! || truncated[i]!)));
  return td;
}

/**
 * Marks rows of a step's output as ended, in place: ORs `rows` into `terminated` (or `truncated`) and updates
 * `done`. Rows that are false keep their flags.
 */
export function markDone(next: TensorDict, rows: readonly boolean[], kind: "terminated" | "truncated" = "terminated"): TensorDict {
  const key = kind === "terminated" ? TERMINATED_KEY : TRUNCATED_KEY;
  const current = readFlags(next, key);
  next.set(key, flagColumn(next.batchSize, current.map((c, i) => c || rows[i] === true)));
  return completeDoneKeys(next);
}

/** Sets every done key of `next` to false in the given rows (all rows by default), in place. */
export function clearDone(next: TensorDict, rows?: readonly boolean[]): TensorDict {
  for (const key of [DONE_KEY, TERMINATED_KEY, TRUNCATED_KEY]) {
    if (!next.has(key)) continue;
    const flags = readFlags(next, key).map((f, i) => (rows === undefined || rows[i] === true ? false : f));
    next.set(key, flagColumn(next.batchSize, flags));
  }
  return next;
}

function sameLayout(a: TensorDictValue, b: TensorDictValue, batchDims: number): boolean {
  if (kindOf(a) !== kindOf(b)) return false;
  if (a instanceof Tensor && b instanceof Tensor) {
    const ra = a.shape.slice(batchDims);
    const rb = b.shape.slice(batchDims);
    return a.dtype === b.dtype && ra.length === rb.length && ra.every((s, i) => s === rb[i]);
  }
  if (a instanceof RaggedTensor && b instanceof RaggedTensor) {
    return a.dtype === b.dtype && a.tailShape.length === b.tailShape.length && a.tailShape.every((s, i) => s === b.tailShape[i]);
  }
  return true;
}

/**
 * The rows of a partial reset: row `i` comes from `fresh` where `mask[i]` is true and from `keep` elsewhere. The
 * result has `fresh`'s keys; a key `keep` lacks (or holds with another kind, dtype or row shape) is taken from
 * `fresh` for every row. Both TensorDicts have the same batch size.
 */
export function mergeRows(keep: TensorDict, fresh: TensorDict, mask: readonly boolean[]): TensorDict {
  if (mask.every((m) => m)) return fresh;
  const n = fresh.numel();
  const flatKeep = keep.reshape([n]);
  const flatFresh = fresh.reshape([n]);
  const pick = Int32Array.from(mask, (m, i) => (m ? n + i : i));
  const out = new TensorDict({}, { batchSize: [n] });
  for (const [key, value] of flatFresh.entries({ nested: true, leavesOnly: true })) {
    const old = flatKeep.get(key, undefined);
    if (old === undefined || old instanceof TensorDict || !sameLayout(old, value, 1)) {
      out.set(key, value);
      continue;
    }
    const both = TensorDict.cat([new TensorDict({ v: old }, { batchSize: [n] }), new TensorDict({ v: value }, { batchSize: [n] })]);
    out.set(key, both.index(pick).get("v"));
  }
  return out.reshape(fresh.batchSize);
}

/** The rows of `td` (flattened, row-major) where `mask` is true, as a TensorDict of batch size `[count]`. */
export function selectRows(td: TensorDict, mask: readonly boolean[]): TensorDict {
  const flat = td.reshape([td.numel()]);
  return flat.index(Int32Array.from(mask.flatMap((m, i) => (m ? [i] : []))));
}
