/**
 * What to say about a field nobody knows: the fields allowed at that place of the schema, and the nearest
 * one when the unknown name looks like a typo (`stepz` → did you mean "steps"?).
 */
import type { z } from "zod";

type Def = { type: string; innerType?: z.ZodType; shape?: Record<string, z.ZodType>; options?: z.ZodType[]; in?: z.ZodType };

/** The parts of zod's public `schema.def` this module reads (wrappers, objects, unions, pipes). */
function defOf(schema: z.ZodType): Def {
  return schema.def;
}

/** The object schemas `schema` may be at this level, through optional/default/nullable/pipe wrappers and unions. */
function objectsOf(schema: z.ZodType, depth = 0): Record<string, z.ZodType>[] {
  if (depth > 16) return [];
  const def = defOf(schema);
  if (def.type === "object" && def.shape !== undefined) return [def.shape];
  if (def.innerType !== undefined) return objectsOf(def.innerType, depth + 1);
  if (def.type === "pipe" && def.in !== undefined) return objectsOf(def.in, depth + 1);
  if (def.type === "union" && def.options !== undefined) return def.options.flatMap((o) => objectsOf(o, depth + 1));
  return [];
}

/** The keys allowed at `path` of `schema` (the union of every object the path may reach), sorted. */
function allowedKeys(schema: z.ZodType, path: readonly PropertyKey[]): string[] {
  let level = [schema];
  for (const key of path) {
    level = level.flatMap((s) => objectsOf(s)).flatMap((shape) => (typeof key === "string" && shape[key] !== undefined ? [shape[key]] : []));
    if (level.length === 0) return [];
  }
  return [...new Set(level.flatMap((s) => objectsOf(s)).flatMap((shape) => Object.keys(shape)))].sort();
}

function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0] ?? 0;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j] ?? 0;
      prev[j] = Math.min(up + 1, (prev[j - 1] ?? 0) + 1, diag + (a[i - 1]?.toLowerCase() === b[j - 1]?.toLowerCase() ? 0 : 1));
      diag = up;
    }
  }
  return prev[b.length] ?? 0;
}

/** The allowed key nearest to `key` when it is close enough to be a typo, else null. */
function nearestKey(key: string, allowed: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Math.max(2, Math.floor(key.length / 3)) + 1;
  for (const candidate of allowed) {
    const d = editDistance(key, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** `"; did you mean \"steps\"?"`-style hint plus the allowed keys, for an unknown `key` at `path`. */
export function unknownFieldHint(schema: z.ZodType, path: readonly PropertyKey[], key: string): string {
  const allowed = allowedKeys(schema, path);
  if (allowed.length === 0) return "";
  const near = nearestKey(key, allowed);
  return `${near !== null ? `; did you mean "${near}"?` : ""}; allowed: ${allowed.join(", ")}`;
}
