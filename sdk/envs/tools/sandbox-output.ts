/** Reads what a code block wrote to a capture file, keeping its head and tail when it is too long. */
import { open } from "node:fs/promises";

/** Text read from a capture file. */
export interface CapturedText {
  /** The text (UTF-8, invalid bytes replaced), with a marker where the middle was left out. */
  readonly text: string;
  /** Whether the middle was left out. */
  readonly truncated: boolean;
}

const decoder = new TextDecoder("utf-8", { fatal: false });

/**
 * The content of `path`, at most `maxBytes` of it: the first and last halves, joined by
 * `\n… [N bytes omitted] …\n`. A missing file reads as empty (the block never started writing).
 */
export async function readCapture(path: string, maxBytes: number): Promise<CapturedText> {
  let handle;
  try {
    handle = await open(path, "r");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { text: "", truncated: false };
    throw err;
  }
  try {
    const { size } = await handle.stat();
    if (size <= maxBytes) {
      const buf = Buffer.alloc(size);
      const { bytesRead } = await handle.read(buf, 0, size, 0);
      return { text: decoder.decode(buf.subarray(0, bytesRead)), truncated: false };
    }
    const headBytes = Math.ceil(maxBytes / 2);
    const tailBytes = maxBytes - headBytes;
    const head = Buffer.alloc(headBytes);
    const tail = Buffer.alloc(tailBytes);
    await handle.read(head, 0, headBytes, 0);
    await handle.read(tail, 0, tailBytes, size - tailBytes);
    const omitted = size - headBytes - tailBytes;
    return { text: `${decoder.decode(head)}\n… [${omitted} bytes omitted] …\n${decoder.decode(tail)}`, truncated: true };
  } finally {
    await handle.close();
  }
}
