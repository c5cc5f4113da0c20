/**
 * Dataset fields: which columns become which TensorDict keys, as which kind of leaf. Every row is checked when the
 * dataset is loaded, so a bad row fails at once with a {@link DatasetFieldError} naming the file, row and field.
 */
import { z } from "zod";
import { History, HistoryBatch, InvalidHistoryError, type ChatMessage } from "../../data/index.js";
import { Tensor, type TensorDictValue } from "../../tensordict/index.js";
import { DatasetFieldError, DatasetFormatError } from "../errors.js";
import type { DatasetFile } from "./read.js";

/**
 * The kind of leaf a field becomes: `"string"` (a string leaf), `"number"` (float64 `[...batch]`), `"int64"`,
 * `"bool"`, `"json"` (any JSON value, as its JSON text in a string leaf) or `"history"` (an array of
 * `{ role, content }` messages, as a HistoryBatch).
 */
export type FieldKind = "string" | "number" | "int64" | "bool" | "json" | "history";

/** One field: the column it comes from, its kind, and whether a row may lack it. */
export const FieldSpecSchema = z.union([
  z.string().min(1),
  z.strictObject({
    /** The dataset column (default: the TensorDict key). */
    column: z.string().min(1).optional(),
    /** The leaf kind (default: inferred from the first row). */
    kind: z.enum(["string", "number", "int64", "bool", "json", "history"]).optional(),
    /** A row may lack it (or hold null): it gets `default` then (default false: that is an error). */
    optional: z.boolean().default(false),
    /** The value of a missing optional field (default: "" / 0 / false / null / [] by kind). */
    default: z.unknown().optional(),
  }),
]);

/** One field: a column name, or `{ column, kind, optional, default }`. */
export type FieldSpec = z.input<typeof FieldSpecSchema>;

/** Fields by TensorDict key. */
export const FieldsSchema = z.record(z.string().min(1), FieldSpecSchema);

/** Fields by TensorDict key (`{ query: "question", answer: "answer" }`). */
export type Fields = z.input<typeof FieldsSchema>;

/** A resolved field. */
interface Field {
  readonly key: string;
  readonly column: string;
  readonly kind: FieldKind | undefined;
  readonly optional: boolean;
  readonly fallback: unknown;
}

/** The converted dataset: one array per key, and where each row came from. */
export interface DatasetColumns {
  /** The TensorDict keys, in field order. */
  readonly keys: readonly string[];
  /** The kind of each key. */
  readonly kinds: ReadonlyMap<string, FieldKind>;
  /** The converted values of each key, one per dataset row (strings, numbers, bigints, booleans or Histories). */
  readonly values: ReadonlyMap<string, readonly unknown[]>;
  /** The number of rows over all files. */
  readonly size: number;
  /** The file and 0-based row of each dataset row. */
  readonly sources: readonly { readonly file: string; readonly row: number }[];
}

function inferKind(value: unknown): FieldKind {
  if (typeof value === "string") return "string";
  if (typeof value === "number") return "number";
  if (typeof value === "bigint") return "int64";
  if (typeof value === "boolean") return "bool";
  if (Array.isArray(value) && value.length > 0 && value.every((m) => typeof m === "object" && m !== null && "role" in m && "content" in m)) return "history";
  return "json";
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

const DEFAULTS: Readonly<Record<FieldKind, unknown>> = { string: "", number: 0, int64: 0n, bool: false, json: null, history: [] };

function convert(value: unknown, kind: FieldKind, fail: (reason: string) => never): unknown {
  switch (kind) {
    case "string":
      if (typeof value !== "string") fail(`expected a string, got ${describe(value)}`);
      return value;
    case "number":
      if (typeof value === "bigint") return Number(value);
      if (typeof value !== "number") fail(`expected a number, got ${describe(value)}`);
      return value;
    case "int64":
      if (typeof value === "bigint") return value;
      if (typeof value !== "number" || !Number.isInteger(value)) fail(`expected an integer, got ${describe(value)}`);
      return BigInt(value);
    case "bool":
      if (typeof value !== "boolean") fail(`expected a boolean, got ${describe(value)}`);
      return value;
    case "json":
      return JSON.stringify(value, (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
    case "history":
      if (!Array.isArray(value)) fail(`expected an array of { role, content } messages, got ${describe(value)}`);
      try {
        return History.from(value as ChatMessage[]);
      } catch (err) {
        if (err instanceof InvalidHistoryError) fail(`not a conversation: ${err.message}`);
        throw err;
      }
  }
}

/**
 * Converts and checks every row of `files` for `fields` (default: every column of the first row, with inferred
 * kinds). Throws DATASET_FIELD naming the file, row and field for a missing or mistyped value.
 */
export function buildColumns(files: readonly DatasetFile[], fields: z.output<typeof FieldsSchema> | undefined): DatasetColumns {
  const first = files.find((f) => f.rows.length > 0);
  if (first === undefined) throw new DatasetFormatError(files[0]?.file ?? "(none)", "the dataset has no rows");
  const specs: Field[] =
    fields === undefined
      ? Object.keys(first.rows[0]!).map((column) => ({ key: column, column, kind: undefined, optional: false, fallback: undefined }))
      : Object.entries(fields).map(([key, spec]) =>
          typeof spec === "string"
            ? { key, column: spec, kind: undefined, optional: false, fallback: undefined }
            : { key, column: spec.column ?? key, kind: spec.kind, optional: spec.optional, fallback: spec.default },
        );
  const kinds = new Map<string, FieldKind>();
  for (const spec of specs) {
    let kind = spec.kind;
    for (const { rows } of files) {
      if (kind !== undefined) break;
      const found = rows.find((row) => row[spec.column] !== undefined && row[spec.column] !== null);
      if (found !== undefined) kind = inferKind(found[spec.column]);
    }
    kinds.set(spec.key, kind ?? (spec.fallback === undefined ? "json" : inferKind(spec.fallback)));
  }
  const values = new Map<string, unknown[]>(specs.map((s) => [s.key, []]));
  const sources: { file: string; row: number }[] = [];
  for (const { file, rows, lines } of files) {
    rows.forEach((row, r) => {
      const where = lines?.[r] === undefined ? "" : ` (line ${lines[r]})`;
      for (const spec of specs) {
        const kind = kinds.get(spec.key)!;
        const fail = (reason: string): never => {
          throw new DatasetFieldError(file, r, spec.column, `${reason}${where}`);
        };
        let value = Object.hasOwn(row, spec.column) ? row[spec.column] : undefined;
        if (value === undefined || value === null) {
          if (!spec.optional) fail(value === null ? "is null" : `is missing (the row has ${JSON.stringify(Object.keys(row))})`);
          value = spec.fallback ?? DEFAULTS[kind];
        }
        values.get(spec.key)!.push(convert(value, kind, fail));
      }
      sources.push({ file, row: r });
    });
  }
  return { keys: specs.map((s) => s.key), kinds, values, size: sources.length, sources };
}

/** The dataset rows `keep` (indices into `columns`, in that order) as a dataset of their own, sources kept. */
export function keepRows(columns: DatasetColumns, keep: readonly number[]): DatasetColumns {
  const values = new Map<string, readonly unknown[]>();
  for (const [key, all] of columns.values) values.set(key, keep.map((i) => all[i]));
  return { keys: columns.keys, kinds: columns.kinds, values, size: keep.length, sources: keep.map((i) => columns.sources[i]!) };
}

/** The leaf of `key` for the dataset rows `indices`, shaped for `batchSize`. */
export function columnLeaf(columns: DatasetColumns, key: string, indices: readonly number[], batchSize: readonly number[]): TensorDictValue {
  const kind = columns.kinds.get(key)!;
  const all = columns.values.get(key)!;
  const picked = indices.map((i) => all[i]);
  switch (kind) {
    case "string":
    case "json":
      return picked as string[];
    case "number":
      return new Tensor("float64", batchSize, Float64Array.from(picked as number[]));
    case "int64":
      return new Tensor("int64", batchSize, BigInt64Array.from(picked as bigint[]));
    case "bool":
      return new Tensor("bool", batchSize, Uint8Array.from(picked as boolean[], (b) => (b ? 1 : 0)));
    case "history":
      return HistoryBatch.stack(picked as History[]);
  }
}
