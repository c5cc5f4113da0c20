// The layering of sdk/ and bridge/ (../shared/STYLE.md, docs/api.md): every import goes down the table below, never up
// and never sideways into another folder of the same layer, so there is no folder cycle. Type-only and dynamic imports
// count too. A new folder must be placed in the table. test/python/test_layers.py checks the same for python_worker/.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");

/** Bottom first. Folders on one line are siblings: neither may import the other. */
const LAYERS: readonly (readonly string[])[] = [
  ["bridge/errors"],
  ["bridge/wire", "bridge/transport"],
  ["bridge/protocol"],
  ["bridge/worker"],
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

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Static, re-export, type-only and dynamic imports of relative modules. */
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)["'](\.{1,2}\/[^"']+)["']/gm;

function importEdges(): Edge[] {
  return ["sdk", "bridge"].flatMap(sourceFiles).flatMap((from) =>
    [...readFileSync(join(ROOT, from), "utf8").matchAll(IMPORT)].map((m) => ({
      from,
      to: relative(ROOT, resolve(ROOT, dirname(from), m[1]!)).replace(/\.js$/, ".ts"),
    })),
  );
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
