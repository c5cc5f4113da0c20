// Where sdk/tensordict sits among the modules: it imports only itself, sdk/core and the bridge (TorchRL's TensorDict
// knows nothing of the leaf types that ride in it; History registers itself from sdk/data), the modules that call
// History's getHistory load the module that adds it, and the runtime import graph of sdk/ and bridge/ has no cycles.
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** One relative import of a module: the file it names and whether it survives compilation. */
interface Edge {
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
function edgesOf(file: string): Edge[] {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const edges: Edge[] = [];
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

describe("sdk/tensordict layering", () => {
  it("imports nothing from sdk/data or any other SDK folder above it, not even types: only sdk/tensordict, sdk/core and bridge", () => {
    const files = tsFiles(join(ROOT, "sdk/tensordict"));
    expect(files.map(rel)).toContain("sdk/tensordict/tensordict.ts");
    const allowed = ["sdk/tensordict/", "sdk/core/", "bridge/"];
    const outside = files.flatMap((file) =>
      edgesOf(file)
        .filter((edge) => !allowed.some((prefix) => rel(edge.to).startsWith(prefix)))
        .map((edge) => `${rel(file)} imports "${edge.specifier}"`),
    );
    expect(outside).toEqual([]);
  });

  it("names no History type in its code or comments (leaf types register themselves)", () => {
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
});

describe("module graph", () => {
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
