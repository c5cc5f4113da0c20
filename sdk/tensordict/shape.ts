/**
 * Shape arithmetic shared by tensors and TensorDicts (internal).
 */
import { IndexOutOfRangeError, InvalidArgumentError, ShapeMismatchError } from "./errors.js";

/** The product of the sizes in `shape` (1 for `[]`). */
export function prod(shape: readonly number[]): number {
  let n = 1;
  for (const s of shape) n *= s;
  return n;
}

/** `[2, 3]` → `"[2, 3]"`. */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

/** True when two shapes are equal. */
export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Checks that `shape` is an array of non-negative safe integers and returns it frozen (a copy, unless it was frozen). */
export function checkShape(shape: unknown, what: string): readonly number[] {
  if (!Array.isArray(shape)) throw new InvalidArgumentError(`${what} must be an array of sizes, got ${typeof shape}`);
  const sizes: unknown[] = shape;
  for (let i = 0; i < sizes.length; i++) {
    const s = sizes[i];
    if (typeof s !== "number" || !Number.isSafeInteger(s) || s < 0) {
      throw new InvalidArgumentError(`${what} ${JSON.stringify(sizes)} must hold non-negative integers`);
    }
  }
  // A frozen array (the shape of another tensor, say) cannot change under us: it is kept rather than copied, which
  // saves an allocation per view on the row-by-row paths (unbind, replay-buffer rows).
  return Object.isFrozen(sizes) ? (sizes as readonly number[]) : Object.freeze(sizes.slice() as number[]);
}

/**
 * Resolves a requested shape holding at most one `-1` against `numel` elements.
 * Throws SHAPE_MISMATCH naming both shapes when they hold different numbers of elements.
 */
export function resolveShape(requested: readonly number[], numel: number, from: readonly number[], what: string): readonly number[] {
  const raw: unknown = requested;
  if (!Array.isArray(raw)) throw new InvalidArgumentError(`${what}: the shape must be an array of sizes`);
  let inferAt = -1;
  let known = 1;
  requested.forEach((s, i) => {
    if (s === -1) {
      if (inferAt !== -1) throw new InvalidArgumentError(`${what}: only one size may be -1, got ${formatShape(requested)}`);
      inferAt = i;
    } else if (!Number.isSafeInteger(s) || s < 0) {
      throw new InvalidArgumentError(`${what}: sizes must be non-negative integers or -1, got ${formatShape(requested)}`);
    } else {
      known *= s;
    }
  });
  const out = requested.slice();
  if (inferAt !== -1) {
    if (known === 0 || numel % known !== 0) {
      throw new ShapeMismatchError(
        `${what}: cannot reshape ${formatShape(from)} (${numel} elements) into ${formatShape(requested)}`,
        requested,
        from,
      );
    }
    out[inferAt] = numel / known;
  } else if (known !== numel) {
    throw new ShapeMismatchError(
      `${what}: cannot reshape ${formatShape(from)} (${numel} elements) into ${formatShape(requested)} (${known} elements)`,
      requested,
      from,
    );
  }
  return Object.freeze(out);
}

/**
 * Normalizes a possibly negative dimension index into `[0, ndim)`;
 * throws INDEX_OUT_OF_RANGE otherwise. `what` names the operation.
 */
export function normalizeDim(dim: number, ndim: number, what: string): number {
  if (!Number.isInteger(dim)) throw new InvalidArgumentError(`${what}: dim must be an integer, got ${String(dim)}`);
  if (dim < -ndim || dim >= ndim) {
    throw new IndexOutOfRangeError(`${what}: dim ${dim} is out of range for ${ndim} batch dimension(s) (expected [${-ndim}, ${ndim - 1}])`, dim, ndim);
  }
  return dim < 0 ? dim + ndim : dim;
}
