/** Parquet datasets, read with hyparquet (pure JS; snappy built in). */
import { parquetReadObjects } from "hyparquet";
import { DatasetFormatError } from "../errors.js";
import { toPlain, type DatasetRow } from "./plain.js";

/** Rows of a Parquet file. */
export async function parseParquet(file: string, bytes: Uint8Array): Promise<DatasetRow[]> {
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  let objects: Record<string, unknown>[];
  try {
    objects = await parquetReadObjects({ file: buffer });
  } catch (err) {
    throw new DatasetFormatError(file, `not a readable Parquet file (${err instanceof Error ? err.message : String(err)})`, undefined, { cause: err });
  }
  return objects.map((row) => toPlain(row) as DatasetRow);
}
