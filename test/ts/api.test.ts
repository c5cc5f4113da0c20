// The public surface is what docs/api.md says it is: for every entry point of package.json "exports", the names its
// barrel exports at runtime are the documented classes, functions and constants, and the names the compiler sees
// (types included) are all the documented names. Adding, renaming or removing an export means updating docs/api.md.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { beforeAll, describe, expect, it } from "vitest";
import { ROOT, sourceEntryPoints } from "./docs-snippets.helpers.js";

/** Kinds of docs/api.md rows that exist at runtime; `type` and `interface` rows do not. */
const RUNTIME_KINDS = new Set(["class", "function", "const"]);
const KINDS = new Set([...RUNTIME_KINDS, "type", "interface"]);

interface DocEntry {
  /** Entry points whose every name this one re-exports (`posttrain` re-exports the sub-paths). */
  readonly reexports: readonly string[];
  /** name -> kind, the rows of its table. */
  readonly rows: ReadonlyMap<string, string>;
}

/** The sections of docs/api.md: `## \`posttrain/x\``, an optional `Re-exports:` line, a `| name | kind | what it is |` table. */
function parseApiDoc(markdown: string): Map<string, DocEntry> {
  const entries = new Map<string, { reexports: string[]; rows: Map<string, string> }>();
  let current: { reexports: string[]; rows: Map<string, string> } | undefined;
  markdown.split(/\r?\n/).forEach((line, i) => {
    const heading = /^## `(posttrain(?:\/[a-z-]+)?)`\s*$/.exec(line);
    if (heading !== null) {
      current = { reexports: [], rows: new Map() };
      entries.set(heading[1]!, current);
      return;
    }
    if (/^#{1,2} /.test(line)) {
      current = undefined; // another section: its tables are not export lists
      return;
    }
    if (current === undefined) return;
    if (line.startsWith("Re-exports:")) {
      current.reexports.push(...[...line.matchAll(/`(posttrain[^`]*)`/g)].map((m) => m[1]!));
      return;
    }
    const row = /^\| `([^`]+)` \| ([a-z]+) \|/.exec(line);
    if (row === null) return;
    const [, name, kind] = row as unknown as [string, string, string];
    if (!KINDS.has(kind)) throw new Error(`docs/api.md:${i + 1}: kind "${kind}" of ${name} is not one of ${[...KINDS].join(", ")}`);
    if (current.rows.has(name)) throw new Error(`docs/api.md:${i + 1}: ${name} is listed twice`);
    current.rows.set(name, kind);
  });
  return entries;
}

/** The documented names of `spec` (those of the entry points it re-exports included), runtime ones only or all. */
function documented(doc: ReadonlyMap<string, DocEntry>, spec: string, runtimeOnly: boolean): string[] {
  const entry = doc.get(spec);
  if (entry === undefined) return [];
  const names = new Set<string>();
  for (const other of entry.reexports) for (const name of documented(doc, other, runtimeOnly)) names.add(name);
  for (const [name, kind] of entry.rows) if (!runtimeOnly || RUNTIME_KINDS.has(kind)) names.add(name);
  return [...names].sort();
}

/** Every exported name of each entry point as the compiler sees it (values and types). */
function compilerExports(entries: ReadonlyMap<string, string>): Map<string, string[]> {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    },
  });
  if (config === undefined) throw new Error("tsconfig.json: not readable");
  const program = ts.createProgram([...entries.values()], { ...config.options, noEmit: true });
  const checker = program.getTypeChecker();
  const out = new Map<string, string[]>();
  for (const [spec, file] of entries) {
    const source = program.getSourceFile(file);
    const module = source === undefined ? undefined : checker.getSymbolAtLocation(source);
    if (module === undefined) throw new Error(`${file}: not a module`);
    out.set(spec, checker.getExportsOfModule(module).map((s) => s.getName()).sort());
  }
  return out;
}

describe("docs/api.md is the public surface", () => {
  const entries = sourceEntryPoints();
  let doc: Map<string, DocEntry>;

  beforeAll(() => {
    doc = parseApiDoc(readFileSync(join(ROOT, "docs", "api.md"), "utf8"));
  });

  it("has one section per entry point of package.json, and re-exports only entry points", () => {
    expect([...doc.keys()].sort()).toEqual([...entries.keys()].sort());
    for (const [spec, entry] of doc) {
      for (const other of entry.reexports) expect(entries.has(other), `${spec} re-exports ${other}`).toBe(true);
    }
  });

  it.each([...entries])("%s: the runtime exports are the documented classes, functions and constants", async (spec, file) => {
    const module = (await import(file)) as Record<string, unknown>;
    expect(Object.keys(module).sort()).toEqual(documented(doc, spec, true));
  });

  it("the compiler's exports (types included) are all the documented names", () => {
    for (const [spec, names] of compilerExports(entries)) {
      expect(names, spec).toEqual(documented(doc, spec, false));
    }
  }, 120_000);
});

describe("parseApiDoc", () => {
  it("reads sections, re-export lines and table rows, and rejects an unknown kind", () => {
    const md = [
      "# API",
      "## `posttrain/a`",
      "| name | kind | what it is |",
      "| --- | --- | --- |",
      "| `A` | class | a class |",
      "| `B` | type | a type |",
      "## `posttrain`",
      "Re-exports: `posttrain/a`.",
      "| `C` | const | a constant |",
      "## Notes",
      "| `D` | const | not an export list |",
    ].join("\n");
    const parsed = parseApiDoc(md);
    expect(documented(parsed, "posttrain", true)).toEqual(["A", "C"]);
    expect(documented(parsed, "posttrain", false)).toEqual(["A", "B", "C"]);
    expect(() => parseApiDoc("## `posttrain`\n| `X` | thing | ? |")).toThrow(/kind "thing"/);
  });
});
