// Every ```ts / ```typescript block of README.md and docs/*.md must typecheck against the SDK in this checkout, under
// the repository's strict compiler options: all blocks in one TypeScript program (a few seconds), each block an ES
// module whose `posttrain` imports point at the sources. A block marked `<!-- snippet: continue -->` is checked
// together with the blocks before it; `<!-- snippet: skip (reason) -->` leaves a fragment out. See
// docs-snippets.helpers.ts. The snippets are not run: only their types are checked.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { ROOT, checkSnippets, extractSnippets, formatFailures, where, type CheckResult, type Snippet } from "./docs-snippets.helpers.js";

const DOC_FILES = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)];

/**
 * A markdown file with one broken block, checked in the same program as the docs: proves that a type error is
 * reported with its file, fence line and diagnostic, and that imports of the package resolve.
 */
const CANARY_FILE = "test/canary.md";
const CANARY = [
  "# Canary", //                                       1
  "", //                                               2
  "```ts", //                                          3
  'import { History } from "posttrain/data";', //      4
  'import { TensorDict } from "posttrain";', //        5
  "const n: number = History.from([]).length;", //     6
  "const td = new TensorDict({}, { batchSize: [n] });", // 7
  "```", //                                            8
  "", //                                               9
  "<!-- snippet: continue -->", //                     10
  "```typescript", //                                  11
  "const s: string = td.batchSize.length;", //         12
  "console.log(s);", //                                13
  "```", //                                            14
  "", //                                               15
  "<!-- snippet: skip (not TypeScript at all) -->", // 16
  "```ts", //                                          17
  "this is not code", //                               18
  "```", //                                            19
].join("\n");

describe("TypeScript snippets in README.md and docs/*.md", () => {
  let docSnippets: Snippet[] = [];
  let result: CheckResult;

  beforeAll(() => {
    docSnippets = DOC_FILES.flatMap((file) => extractSnippets(file, readFileSync(join(ROOT, file), "utf8")));
    result = checkSnippets([...docSnippets, ...extractSnippets(CANARY_FILE, CANARY)]);
  });

  it("finds the blocks", () => {
    expect(docSnippets.length).toBeGreaterThan(40);
    for (const file of ["README.md", "docs/tensordict.md", "docs/history.md", "docs/tools.md", "docs/trainers.md"]) {
      expect(docSnippets.some((s) => s.file === file), file).toBe(true);
    }
  });

  it("typechecks every block that is not marked skip", () => {
    expect(result.global, "compiler diagnostics outside the snippets").toEqual([]);
    const failures = result.failures.filter((f) => f.snippet.file !== CANARY_FILE);
    expect(failures.length, `snippets that do not typecheck:\n\n${formatFailures(failures)}\n`).toBe(0);
    // Skips are for fragments that cannot stand alone; keep them few.
    const skipped = result.skipped.filter((s) => s.file !== CANARY_FILE);
    expect(skipped.length, skipped.map((s) => `${where(s)}: ${s.skip ?? ""}`).join("\n")).toBeLessThanOrEqual(5);
  });

  it("reports a broken block with its file, fence line and diagnostics", () => {
    const canary = result.failures.filter((f) => f.snippet.file === CANARY_FILE);
    expect(canary.map((f) => where(f.snippet))).toEqual([`${CANARY_FILE}:11`]);
    expect(canary[0]!.diagnostics).toEqual([
      `${CANARY_FILE}:12:7 TS2322: Type 'number' is not assignable to type 'string'.`,
    ]);
    expect(result.skipped.filter((s) => s.file === CANARY_FILE).map(where)).toEqual([`${CANARY_FILE}:17`]);
  });
});

describe("extractSnippets", () => {
  it("reads ts and typescript blocks, other languages aside, with their directives", () => {
    const md = [
      "```ts",
      "const a = 1;",
      "```",
      "```python",
      "x = 1",
      "```",
      "<!-- snippet: continue -->",
      "",
      "````typescript",
      "```",
      "const b = a;",
      "````",
      "<!-- snippet: skip (a fragment) -->",
      "```ts",
      "{ a: 1 }",
      "```",
    ].join("\n");
    expect(extractSnippets("x.md", md)).toEqual([
      { file: "x.md", fenceLine: 1, code: "const a = 1;", skip: null, continues: false },
      { file: "x.md", fenceLine: 9, code: "```\nconst b = a;", skip: null, continues: true },
      { file: "x.md", fenceLine: 14, code: "{ a: 1 }", skip: "a fragment", continues: false },
    ]);
  });

  it("refuses an unknown directive, a skip without a reason and an unclosed block", () => {
    expect(() => extractSnippets("x.md", "<!-- snippet: skipp -->\n```ts\n1\n```")).toThrow(/x\.md:2: unknown snippet directive "skipp"/);
    expect(() => extractSnippets("x.md", "<!-- snippet: skip -->\n```ts\n1\n```")).toThrow(/unknown snippet directive "skip"/);
    expect(() => extractSnippets("x.md", "text\n```ts\nconst a = 1;\n")).toThrow(/x\.md:2: the code block is never closed/);
  });

  it("refuses a continue with nothing before it", () => {
    const snippets = extractSnippets("x.md", "<!-- snippet: continue -->\n```ts\nconst a = 1;\n```");
    expect(() => checkSnippets(snippets)).toThrow(/x\.md:2: "snippet: continue" but no checked block comes before it/);
  });
});
