/** Writing a file atomically: readers (and a crash) see the old content or the new, never a torn one. */
import { rename, rm, writeFile } from "node:fs/promises";

/**
 * Writes `data` to `path` through a temporary file beside it (`<path>.tmp-<pid>`) renamed over it; the temporary
 * file is removed when the write fails.
 *
 * @example await writeFileAtomic("runs/a/config.yaml", yamlText);
 */
export async function writeFileAtomic(path: string, data: string): Promise<void> {
  const tmp = `${path}.tmp-${String(process.pid)}`;
  try {
    await writeFile(tmp, data, "utf8");
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => undefined);
    throw err;
  }
}
