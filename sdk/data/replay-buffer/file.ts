/**
 * The replay-buffer file (internal): one Arrow IPC *file* (the random-access format, magic `ARROW1`) whose single
 * record batch holds the storage rows in the TensorDict wire layout of docs/protocol.md, with a JSON entry under the
 * schema metadata key `posttrain.replay_buffer` (sampler, writer and transform state, priorities, counters).
 * Written to a temporary file in the same folder, then renamed over the target, so a reader never sees half a file.
 */
import { randomBytes } from "node:crypto";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import { RecordBatch, Schema, Table, tableFromIPC, tableToIPC } from "apache-arrow";
import { TensorDict } from "../../tensordict/tensordict.js";
import { ReplayBufferFileError } from "./errors.js";

/** The schema metadata key holding the buffer's JSON metadata. */
export const METADATA_KEY = "posttrain.replay_buffer";

const MAGIC = "ARROW1";

/** Writes `rows` and `metadata` to `path` atomically (temporary file + rename). */
export async function writeBufferFile(path: string, rows: TensorDict, metadata: unknown): Promise<void> {
  const table = tableFromIPC(rows.toArrow());
  const meta = new Map(table.schema.metadata);
  meta.set(METADATA_KEY, JSON.stringify(metadata));
  const schema = new Schema(table.schema.fields, meta);
  const bytes = tableToIPC(new Table(schema, table.batches.map((batch) => new RecordBatch(schema, batch.data))), "file");
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    await writeFile(tmp, bytes);
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** Reads a file written by {@link writeBufferFile}: the rows and the parsed (unvalidated) JSON metadata. */
export async function readBufferFile(path: string): Promise<{ rows: TensorDict; metadata: unknown }> {
  const bytes = await readFile(path);
  if (bytes.length < 12 || bytes.subarray(0, MAGIC.length).toString("latin1") !== MAGIC) {
    throw new ReplayBufferFileError(path, "not an Arrow IPC file (no ARROW1 magic)");
  }
  let table: Table;
  try {
    table = tableFromIPC(bytes);
  } catch (err) {
    throw new ReplayBufferFileError(path, `unreadable Arrow IPC file: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const text = table.schema.metadata.get(METADATA_KEY);
  if (text === undefined) throw new ReplayBufferFileError(path, `no ${JSON.stringify(METADATA_KEY)} schema metadata: not a replay buffer file`);
  let metadata: unknown;
  try {
    metadata = JSON.parse(text);
  } catch (err) {
    throw new ReplayBufferFileError(path, `the ${JSON.stringify(METADATA_KEY)} metadata is not valid JSON`, { cause: err });
  }
  let rows: TensorDict;
  try {
    rows = TensorDict.fromArrow(tableToIPC(table, "stream"));
  } catch (err) {
    throw new ReplayBufferFileError(path, `the rows are not a valid TensorDict: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  return { rows, metadata };
}
