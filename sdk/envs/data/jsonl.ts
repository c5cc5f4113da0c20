/** JSON Lines datasets: one JSON object per line; blank lines are skipped. */
import { DatasetFormatError } from "../errors.js";
import type { DatasetRow } from "./plain.js";

/** Rows of a JSONL text, with the 1-based line number of each row. */
export function parseJSONL(file: string, text: string): { rows: DatasetRow[]; lines: number[] } {
  const rows: DatasetRow[] = [];
  const lines: number[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      throw new DatasetFormatError(file, `line ${i + 1} is not valid JSON (${err instanceof Error ? err.message : String(err)})`, rows.length, { cause: err });
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new DatasetFormatError(file, `line ${i + 1} must be a JSON object, got ${Array.isArray(value) ? "an array" : value === null ? "null" : typeof value}`, rows.length);
    }
    rows.push(value as DatasetRow);
    lines.push(i + 1);
  });
  return { rows, lines };
}
