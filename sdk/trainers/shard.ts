/**
 * How a trainer group splits a batch over its ranks: rows balanced by token count, so that every rank's forward and
 * backward take about as long (the step waits for the slowest rank).
 */
import { z } from "zod";
import { InvalidArgumentError } from "../core/errors.js";
import { parseOptions } from "../core/validation.js";
import { RaggedTensor, Tensor, TensorDict } from "../tensordict/index.js";

const TOKENS = ["tokens", "full"] as const;
const ATTENTION_MASK = ["masks", "all_attention_mask"] as const;

/**
 * The tokens of each row of `flat` (a batch with one batch dimension): the row's length in `("tokens","full")` when
 * it is ragged; for dense `[rows, L]` tokens, the row's ones in `("masks","all_attention_mask")` when that is given
 * with the same shape, else `L`; 1 a row without `("tokens","full")` (the worker then reports the missing key).
 */
function rowTokens(flat: TensorDict): number[] {
  const rows = flat.numel();
  const tokens = flat.has([...TOKENS]) ? flat.get([...TOKENS]) : undefined;
  if (tokens instanceof RaggedTensor) return Array.from(tokens.lengths());
  if (tokens instanceof Tensor && tokens.ndim >= 2) {
    const width = tokens.shape[1]!;
    const mask = flat.has([...ATTENTION_MASK]) ? flat.get([...ATTENTION_MASK]) : undefined;
    if (mask instanceof Tensor && mask.ndim === 2 && mask.shape[1] === width) {
      const values = mask.toNumbers();
      return Array.from({ length: rows }, (_, r) => {
        let n = 0;
        for (let t = 0; t < width; t++) if (values[r * width + t] !== 0) n++;
        return n;
      });
    }
    return new Array<number>(rows).fill(width);
  }
  return new Array<number>(rows).fill(1);
}

/**
 * The row indices of each of `n` shards: longest row first, each to the shard with the fewest tokens so far (then
 * the fewest rows, then the lowest rank), each shard's rows then put back in their order in the batch. Deterministic.
 */
function balanceRows(tokens: readonly number[], n: number): number[][] {
  const order = tokens.map((_, i) => i).sort((a, b) => tokens[b]! - tokens[a]! || a - b);
  const shards = Array.from({ length: n }, () => ({ load: 0, rows: [] as number[] }));
  for (const row of order) {
    let best = 0;
    for (let r = 1; r < n; r++) {
      const [s, b] = [shards[r]!, shards[best]!];
      if (s.load < b.load || (s.load === b.load && s.rows.length < b.rows.length)) best = r;
    }
    shards[best]!.load += tokens[row]!;
    shards[best]!.rows.push(row);
  }
  return shards.map((s) => s.rows.sort((a, b) => a - b));
}

/**
 * Splits the rows of `batch` into `n` shards balanced by token count, one per rank of a trainer group
 * (`Trainer.createGroup`): the rows are dealt longest first, each to the shard with the fewest tokens so far, and each
 * shard keeps its rows in their order in `batch`. A row's tokens are its length in `("tokens","full")` (ragged), or
 * for dense `[*batch, L]` tokens its ones in `("masks","all_attention_mask")` (else `L`). Every shard is a batch of
 * rows (batch size `[rows]`, the batch dimensions flattened row-major, leaves copied); `n = 1` gives `[batch]`.
 * Throws `InvalidArgumentError` when `batch` has fewer rows than `n` (every rank needs at least one).
 *
 * Per-token advantages should be ragged: a dense `[*batch, T]` advantage (T = the longest row) no longer fits a shard
 * whose longest row is shorter.
 *
 * ```ts
 * const [a, b] = shardByTokens(batch, 2); // a.rows + b.rows === batch.numel()
 * ```
 */
export function shardByTokens(batch: TensorDict, n: number): TensorDict[] {
  parseOptions(z.instanceof(TensorDict), batch, "shardByTokens batch");
  parseOptions(z.number().int().min(1), n, "shardByTokens n");
  const rows = batch.numel();
  if (rows < n || (batch.batchDims === 0 && n > 1)) {
    throw new InvalidArgumentError(
      `shardByTokens batch: ${String(rows)} row(s) (batch size [${batch.batchSize.join(", ")}]) for ${String(n)} rank(s); every rank needs at least one row`,
    );
  }
  if (n === 1) return [batch];
  const flat = batch.batchDims === 1 ? batch : batch.reshape([rows]);
  return balanceRows(rowTokens(flat), n).map((indices) => flat.index(indices));
}
