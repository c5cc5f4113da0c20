// The layering of sdk/ and bridge/ (docs/architecture.md): every import goes down the table below, never up
// and never sideways into another folder of the same layer, so there is no folder cycle. Type-only and dynamic imports
// count too. A new folder must be placed in the table. test/python/test_layers.py checks the same for python_worker/.
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");

/** Bottom first. Folders on one line are siblings: neither may import the other. */
const LAYERS: readonly (readonly string[])[] = [
  ["bridge/errors"],
  ["bridge/wire", "bridge/transport"],
  ["bridge/protocol"],
  ["bridge/worker", "bridge/deprecated"],
  ["bridge/setup"],
  ["bridge/index.ts"],
  ["sdk/core"],
  ["sdk/tensordict"],
  ["sdk/workers"],
  ["sdk/data", "sdk/objectives", "sdk/models", "sdk/reports"],
  ["sdk/modules"],
  ["sdk/envs"],
  ["sdk/trainers", "sdk/collectors"],
  ["sdk/runs"],
  ["sdk/cli"],
  ["sdk/index.ts"],
];

/** An import of one file by another, both relative to the repository root. */
interface Edge {
  readonly from: string;
  readonly to: string;
}

/** The unit of the table a file belongs to: its folder (or lone module) under sdk/ or bridge/, or a top-level index. */
function unitOf(file: string): string {
  const [top, second] = file.split("/");
  if (second === undefined || second === "index.ts") return file;
  return `${top}/${second.replace(/\.ts$/, "")}`;
}

function layerOf(unit: string): number {
  return LAYERS.findIndex((layer) => layer.includes(unit));
}

/** Every problem with `edges`: a file in no layer, an upward import, a sideways import. Empty when all is well. */
function violations(edges: readonly Edge[]): string[] {
  const problems = new Set<string>();
  for (const { from, to } of edges) {
    const [a, b] = [unitOf(from), unitOf(to)];
    if (a === b) continue;
    const [la, lb] = [layerOf(a), layerOf(b)];
    for (const [unit, layer] of [[a, la], [b, lb]] as const) if (layer === -1) problems.add(`${unit}: not in the layer table`);
    if (la === -1 || lb === -1) continue;
    if (lb > la) problems.add(`${from} imports ${to}: ${a} is below ${b}`);
    if (lb === la) problems.add(`${from} imports ${to}: ${a} and ${b} are siblings`);
  }
  return [...problems].sort();
}

/** One relative import of a module: the file it names and whether it survives compilation. */
interface ImportEdge {
  readonly to: string;
  readonly specifier: string;
  /** False for `import type` / `export type` and module augmentations (erased); `import { type A }` stays. */
  readonly runtime: boolean;
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return tsFiles(path);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** The relative imports, re-exports, dynamic imports and module augmentations of a source file. */
function edgesOf(file: string): ImportEdge[] {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const edges: ImportEdge[] = [];
  const add = (specifier: ts.Node | undefined, runtime: boolean): void => {
    if (specifier === undefined || !ts.isStringLiteral(specifier) || !specifier.text.startsWith(".")) return;
    edges.push({ to: resolve(dirname(file), specifier.text.replace(/\.js$/, ".ts")), specifier: specifier.text, runtime });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) add(node.moduleSpecifier, node.importClause?.phaseModifier !== ts.SyntaxKind.TypeKeyword);
    else if (ts.isExportDeclaration(node)) add(node.moduleSpecifier, !node.isTypeOnly);
    else if (ts.isModuleDeclaration(node)) add(node.name, false);
    else if (ts.isImportTypeNode(node)) add(ts.isLiteralTypeNode(node.argument) ? node.argument.literal : undefined, false);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) add(node.arguments[0], true);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return edges;
}

const rel = (path: string): string => relative(ROOT, path);

/** Every relative import (static, type-only, dynamic, re-export, module augmentation) of sdk/ and bridge/. */
function importEdges(): Edge[] {
  return ["sdk", "bridge"].flatMap((dir) => tsFiles(join(ROOT, dir))).flatMap((file) => edgesOf(file).map((edge) => ({ from: rel(file), to: rel(edge.to) })));
}

describe("layers of sdk/ and bridge/", () => {
  const edges = importEdges();

  it("reads the imports (the check has something to check)", () => {
    expect(edges.length).toBeGreaterThan(500);
    expect(edges).toContainEqual({ from: "sdk/index.ts", to: "sdk/runs/index.ts" });
  });

  it("imports only downward, never sideways, and every folder is placed", () => {
    expect(violations(edges)).toEqual([]);
  });

  it("reports an upward import, a sideways one and an unplaced folder", () => {
    const bad = [
      { from: "sdk/tensordict/tensordict.ts", to: "sdk/data/history.ts" },
      { from: "sdk/trainers/trainer.ts", to: "sdk/collectors/llm-collector.ts" },
      { from: "sdk/extras/thing.ts", to: "sdk/core/index.ts" },
      { from: "sdk/runs/grpo-trainer.ts", to: "sdk/trainers/trainer.ts" },
    ];
    expect(violations(bad)).toEqual([
      "sdk/extras: not in the layer table",
      "sdk/tensordict/tensordict.ts imports sdk/data/history.ts: sdk/tensordict is below sdk/data",
      "sdk/trainers/trainer.ts imports sdk/collectors/llm-collector.ts: sdk/trainers and sdk/collectors are siblings",
    ]);
  });
});

describe("leaf types and the module graph", () => {
  it("sdk/tensordict names no History type in its code or comments (leaf types register themselves)", () => {
    const mentions = tsFiles(join(ROOT, "sdk/tensordict")).flatMap((file) =>
      readFileSync(file, "utf8")
        .split("\n")
        .flatMap((line, i) => (/\bHistory(Batch)?\b/.test(line) ? [`${rel(file)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(mentions).toEqual([]);
  });

  it("the edge parser sees every form of import (canary)", () => {
    const edges = edgesOf(join(ROOT, "sdk/data/history.ts"));
    const of = (specifier: string): boolean[] => edges.filter((e) => e.specifier === specifier).map((e) => e.runtime);
    expect(of("../tensordict/keys.js")).toEqual([false]); // import type
    expect(of("../tensordict/tensordict.js")).toEqual([true, false]); // import, then declare module
    expect(of("../tensordict/leaf.js")).toEqual([true, false]);
    expect(of("./history.js")).toEqual([]);
    expect(edgesOf(join(ROOT, "sdk/data/wire.ts")).find((e) => e.specifier === "./history.js")?.runtime).toBe(false);
  });

  it("every module that calls getHistory loads sdk/data/history.ts, which adds it to TensorDict", () => {
    // The augmentation types getHistory everywhere; the method exists once history.ts has run.
    const runtimeDeps = (file: string): string[] => edgesOf(file).filter((edge) => edge.runtime).map((edge) => edge.to);
    const loads = (file: string, target: string): boolean => {
      const seen = new Set<string>();
      const stack = [file];
      while (stack.length > 0) {
        const next = stack.pop()!;
        if (next === target) return true;
        if (seen.has(next)) continue;
        seen.add(next);
        stack.push(...runtimeDeps(next));
      }
      return false;
    };
    const callers = [...tsFiles(join(ROOT, "sdk")), ...tsFiles(join(ROOT, "examples"))].filter((file) => readFileSync(file, "utf8").includes(".getHistory("));
    expect(callers.length).toBeGreaterThan(5);
    const history = join(ROOT, "sdk/data/history.ts");
    expect(callers.filter((file) => !loads(file, history)).map(rel)).toEqual([]);
  });

  it("sdk/ and bridge/ have no runtime import cycles", () => {
    const graph = new Map<string, string[]>();
    for (const file of [...tsFiles(join(ROOT, "sdk")), ...tsFiles(join(ROOT, "bridge"))]) {
      graph.set(file, edgesOf(file).filter((edge) => edge.runtime).map((edge) => edge.to));
    }
    const state = new Map<string, "active" | "done">();
    const stack: string[] = [];
    const cycles: string[] = [];
    const visit = (file: string): void => {
      if (state.get(file) === "done") return;
      if (state.get(file) === "active") {
        cycles.push([...stack.slice(stack.indexOf(file)), file].map(rel).join(" -> "));
        return;
      }
      state.set(file, "active");
      stack.push(file);
      for (const dep of graph.get(file) ?? []) visit(dep);
      stack.pop();
      state.set(file, "done");
    };
    for (const file of graph.keys()) visit(file);
    expect(cycles).toEqual([]);
  });
});
