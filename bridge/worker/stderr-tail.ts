/** Keeps the last lines written to a stream, for error messages about a worker that died. */
export class LineTail {
  private readonly lines: string[] = [];
  private partial = "";

  constructor(private readonly maxLines = 40) {}

  /** Adds a chunk; calls `onLine` for each completed line. */
  push(chunk: string, onLine?: (line: string) => void): void {
    const parts = (this.partial + chunk).split("\n");
    this.partial = parts.pop() ?? "";
    for (const line of parts) {
      this.lines.push(line);
      if (this.lines.length > this.maxLines) this.lines.shift();
      onLine?.(line);
    }
  }

  /** The kept lines, plus any unterminated last line. */
  text(): string {
    return [...this.lines, ...(this.partial === "" ? [] : [this.partial])].join("\n");
  }
}
