/** Arrow IPC datasets (`.arrow`, `.feather`, `.arrows`, `.ipc`): the file or the stream format. */
import { tableFromIPC } from "apache-arrow";
import { DatasetFormatError } from "../errors.js";
import { toPlain, type DatasetRow } from "./plain.js";

/** Rows of an Arrow IPC file or stream. */
export function parseArrow(file: string, bytes: Uint8Array): DatasetRow[] {
  let table;
  try {
    table = tableFromIPC(bytes);
  } catch (err) {
    throw new DatasetFormatError(file, `not an Arrow IPC file or stream (${err instanceof Error ? err.message : String(err)})`, undefined, { cause: err });
  }
  if (table.schema.fields.length === 0) throw new DatasetFormatError(file, "not an Arrow IPC file or stream (no columns)");
  const names = table.schema.fields.map((f) => f.name);
  const columns = names.map((_, i) => table.getChildAt(i));
  const rows: DatasetRow[] = [];
  for (let r = 0; r < table.numRows; r++) {
    const row: Record<string, unknown> = {};
    names.forEach((name, i) => {
      row[name] = toPlain(columns[i]?.get(r) ?? null);
    });
    rows.push(row);
  }
  return rows;
}
