/** Reads a dataset file by its extension: `.jsonl` / `.ndjson`, `.parquet`, `.arrow` / `.feather` / `.arrows` / `.ipc`. */
import { readFile } from "node:fs/promises";
import { DatasetFormatError, DatasetNotFoundError } from "../errors.js";
import { parseArrow } from "./arrow.js";
import { parseJSONL } from "./jsonl.js";
import { parseParquet } from "./parquet.js";
import type { DatasetRow } from "./plain.js";

/** The dataset file formats, by extension. */
export const DATASET_EXTENSIONS: Readonly<Record<string, "jsonl" | "parquet" | "arrow">> = Object.freeze({
  ".jsonl": "jsonl",
  ".ndjson": "jsonl",
  ".parquet": "parquet",
  ".arrow": "arrow",
  ".arrows": "arrow",
  ".feather": "arrow",
  ".ipc": "arrow",
});

/** The rows of one file, and how to name a row in messages. */
export interface DatasetFile {
  /** The path as given. */
  readonly file: string;
  /** The rows, in file order. */
  readonly rows: readonly DatasetRow[];
  /** For JSONL: the 1-based line of each row. */
  readonly lines?: readonly number[];
}

/** Reads every row of a dataset file. Throws DATASET_NOT_FOUND or DATASET_FORMAT naming the file. */
export async function readDatasetFile(file: string): Promise<DatasetFile> {
  const lower = file.toLowerCase();
  const ext = Object.keys(DATASET_EXTENSIONS).find((e) => lower.endsWith(e));
  if (ext === undefined) {
    throw new DatasetFormatError(file, `unknown extension; expected one of ${Object.keys(DATASET_EXTENSIONS).join(", ")}`);
  }
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const reason = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory" : `cannot be read (${err instanceof Error ? err.message : String(err)})`;
    throw new DatasetNotFoundError(file, reason, { cause: err });
  }
  const format = DATASET_EXTENSIONS[ext]!;
  if (format === "jsonl") {
    const { rows, lines } = parseJSONL(file, bytes.toString("utf8"));
    return { file, rows, lines };
  }
  if (format === "parquet") return { file, rows: await parseParquet(file, bytes) };
  return { file, rows: parseArrow(file, bytes) };
}
