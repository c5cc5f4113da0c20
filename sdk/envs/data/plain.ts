/**
 * Plain JavaScript values from what the file readers return: Arrow vectors and struct rows become arrays and
 * objects, 64-bit integers become numbers when they are safe integers (else they stay bigints).
 */

/** A dataset row: column name → plain value. */
export type DatasetRow = Readonly<Record<string, unknown>>;

interface ArrowLike {
  toArray(): ArrayLike<unknown>;
}

interface JsonLike {
  toJSON(): unknown;
}

function isArrowVector(value: object): value is ArrowLike {
  return typeof (value as Partial<ArrowLike>).toArray === "function" && "type" in value;
}

/** `value` with Arrow vectors, struct rows, typed arrays and safe bigints turned into plain JS values. */
export function toPlain(value: unknown): unknown {
  if (typeof value === "bigint") return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
  if (value === null || typeof value !== "object") return value;
  if (value instanceof Date) return value.toISOString();
  if (ArrayBuffer.isView(value)) return Array.from(value as unknown as ArrayLike<unknown>, toPlain);
  if (Array.isArray(value)) return value.map(toPlain);
  if (isArrowVector(value)) return Array.from(value.toArray(), toPlain);
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null && typeof (value as Partial<JsonLike>).toJSON === "function") {
    return toPlain((value as JsonLike).toJSON());
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = toPlain(v);
  return out;
}
