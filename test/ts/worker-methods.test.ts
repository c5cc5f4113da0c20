// The TS method table (sdk/workers/methods.ts) against the Python registry, as the worker describes it
// (`python -m posttrain_worker --describe-methods`): the same methods, the same argument fields, compatible
// required-ness, nullability, kinds and payloads. A method added on one side only, or a renamed argument, fails here.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { resolvePython } from "../../bridge/index.js";
import { WORKER_METHODS, type WorkerMethod } from "../../sdk/workers/methods.js";

interface PythonArg {
  readonly type: string;
  readonly required: boolean;
  readonly nullable: boolean;
}
interface PythonMethod {
  readonly thread: string;
  readonly payloads: "any" | readonly string[];
  readonly args: Readonly<Record<string, PythonArg>>;
}

/** The protocol's own methods: the bridge calls them (bridge/worker/connection.ts), not the SDK. */
const BRIDGE_METHODS = ["handshake", "shutdown"];

type Def = { type: string; innerType?: z.ZodType; in?: z.ZodType; shape?: Record<string, z.ZodType> };
function defOf(schema: z.ZodType): Def {
  return schema.def;
}

/** The Python argument kind a zod field corresponds to. */
function kindOf(schema: z.ZodType): string {
  const def = defOf(schema);
  if (def.innerType !== undefined) return kindOf(def.innerType);
  if (def.type === "pipe" && def.in !== undefined) return kindOf(def.in);
  switch (def.type) {
    case "string":
      return "string";
    case "enum":
      return "choice";
    case "number":
      return (schema as z.ZodNumber).format?.includes("int") === true ? "integer" : "number";
    case "boolean":
      return "boolean";
    case "array":
      return "strings";
    case "lazy":
      return "json";
    default:
      return "object";
  }
}

function shapeOf(method: WorkerMethod): Record<string, z.ZodType> {
  const shape = defOf(method.args).shape;
  if (shape === undefined) throw new Error("every args schema is an object");
  return shape;
}

const PAYLOADS = { none: [], tensordict: ["tensordict"], any: "any", tensors: ["tensor"] } as const;

/** Every way `table` disagrees with the worker's registry, one line each (empty when they agree). */
function mismatches(table: Readonly<Record<string, WorkerMethod>>, python: Readonly<Record<string, PythonMethod>>): string[] {
  const problems: string[] = [];
  const served = Object.keys(python).filter((name) => !BRIDGE_METHODS.includes(name));
  for (const name of served) if (!(name in table)) problems.push(`${name}: served by the worker, not in the table`);
  for (const [name, method] of Object.entries(table)) {
    const py = python[name];
    if (py === undefined) {
      problems.push(`${name}: in the table, not served by the worker`);
      continue;
    }
    if (JSON.stringify(py.payloads) !== JSON.stringify(PAYLOADS[method.takes])) problems.push(`${name}: takes ${method.takes}, worker takes ${JSON.stringify(py.payloads)}`);
    const shape = shapeOf(method);
    for (const field of Object.keys(shape)) if (!(field in py.args)) problems.push(`${name}.${field}: not an argument of the worker's`);
    for (const [field, arg] of Object.entries(py.args)) {
      const schema = shape[field];
      if (schema === undefined) {
        problems.push(`${name}.${field}: an argument of the worker's, not in the table`);
        continue;
      }
      // The worker requires it ⇒ TS never leaves it out; TS may send null ⇒ the worker accepts null.
      if (arg.required && schema.safeParse(undefined).success) problems.push(`${name}.${field}: required by the worker, optional here`);
      if (!arg.nullable && schema.safeParse(null).success) problems.push(`${name}.${field}: nullable here, not in the worker`);
      if (kindOf(schema) !== arg.type) problems.push(`${name}.${field}: ${kindOf(schema)} here, ${arg.type} in the worker`);
    }
  }
  return problems;
}

describe("worker method table", () => {
  let python: Readonly<Record<string, PythonMethod>>;

  beforeAll(async () => {
    const { stdout } = await promisify(execFile)(resolvePython(), ["-m", "posttrain_worker", "--describe-methods"], { timeout: 60_000 });
    python = (JSON.parse(stdout) as { methods: Record<string, PythonMethod> }).methods;
  });

  it("agrees with the worker's registry: methods, argument fields, required-ness, nullability, kinds, payloads", () => {
    expect(mismatches(WORKER_METHODS, python)).toEqual([]);
    for (const name of BRIDGE_METHODS) expect(python).toHaveProperty(name);
  });

  it("reports each kind of drift (the check is not vacuous)", () => {
    const { unload_model, ping, ...rest } = WORKER_METHODS;
    const drifted: Record<string, WorkerMethod> = {
      ...rest,
      unload_model: { ...unload_model, args: z.strictObject({ name: z.string().optional(), force: z.boolean() }) },
      ping: { ...ping, takes: "tensordict" },
      row_sums: ping,
    };
    delete drifted.list_models;
    expect(mismatches(drifted, python).sort()).toEqual(
      [
        "list_models: served by the worker, not in the table",
        "ping: takes tensordict, worker takes []",
        "row_sums: in the table, not served by the worker",
        "unload_model.force: not an argument of the worker's",
        "unload_model.name: required by the worker, optional here",
      ].sort(),
    );
  });
});
