/**
 * What a `ParallelEnv` thread can build an env from (a function cannot cross into a thread): a built-in env by its
 * Gymnasium id, or a module URL and the name of an exported factory.
 */
import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { InvalidArgumentError, JSONValueSchema, parseOptions, type JSONValue } from "../core/index.js";
import type { SpecifiedEnv } from "./batched-env.js";
import { CartPoleEnv } from "./control/cart-pole.js";
import { PendulumEnv } from "./control/pendulum.js";

/** The built-in envs by Gymnasium id, each built from its options object. */
const BUILT_IN_ENVS = {
  "CartPole-v1": (options: Record<string, JSONValue>) => new CartPoleEnv(options),
  "Pendulum-v1": (options: Record<string, JSONValue>) => new PendulumEnv(options),
} as const;

/** The ids of the built-in envs. */
export const BUILT_IN_ENV_IDS = ["CartPole-v1", "Pendulum-v1"] as const;

/** One of {@link BUILT_IN_ENV_IDS}, e.g. `const id: BuiltInEnvId = "CartPole-v1"`. */
export type BuiltInEnvId = (typeof BUILT_IN_ENV_IDS)[number];

/**
 * How to build one copy of an env in a thread:
 * - `{ env: "CartPole-v1" | "Pendulum-v1", options? }`: a built-in env and its constructor options;
 * - `{ module, export?, options? }`: `module` is a URL (`file:`, or a path, resolved against the working directory)
 *   of an ES module whose export `export` (default `"default"`) is a function `(options) => env` returning an env of
 *   batch size `[]` with specs. `options` must be JSON, as it is copied into each thread.
 */
export const EnvFactorySchema = z.union([
  z.strictObject({
    env: z.enum(BUILT_IN_ENV_IDS),
    options: z.record(z.string(), JSONValueSchema).optional(),
  }),
  z.strictObject({
    module: z.union([z.string().min(1), z.instanceof(URL)]),
    export: z.string().min(1).default("default"),
    options: JSONValueSchema.optional(),
  }),
]);

/** How to build one copy of an env in a thread (see {@link EnvFactorySchema}). */
export type EnvFactory = z.input<typeof EnvFactorySchema>;

/** A parsed {@link EnvFactory} whose module (if any) is an absolute URL, ready to cross into a thread. */
export type ResolvedEnvFactory =
  | { readonly env: BuiltInEnvId; readonly options?: Record<string, JSONValue> | undefined }
  | { readonly module: string; readonly export: string; readonly options?: JSONValue | undefined };

/** Checks `factory` (naming `where` in errors) and makes its module an absolute URL. */
export function resolveEnvFactory(factory: EnvFactory, where: string): ResolvedEnvFactory {
  const parsed = parseOptions(EnvFactorySchema, factory, where);
  if ("env" in parsed) return parsed;
  const { module } = parsed;
  let href: string;
  if (module instanceof URL) href = module.href;
  else if (/^[a-z][a-z0-9+.-]*:/i.test(module) && !/^[a-z]:[\\/]/i.test(module)) href = module;
  else href = pathToFileURL(isAbsolute(module) ? module : resolve(module)).href;
  return { module: href, export: parsed.export, options: parsed.options };
}

/** A built-in env, synchronously (undefined for a module factory). */
export function builtInEnv(factory: ResolvedEnvFactory): SpecifiedEnv | undefined {
  return "env" in factory ? BUILT_IN_ENVS[factory.env](factory.options ?? {}) : undefined;
}

/** The function that builds one copy: the built-in constructor, or the module's export (imported here). */
export async function loadEnvFactory(factory: ResolvedEnvFactory): Promise<() => SpecifiedEnv> {
  if ("env" in factory) return () => builtInEnv(factory)!;
  let mod: Record<string, unknown>;
  try {
    mod = (await import(factory.module)) as Record<string, unknown>;
  } catch (err) {
    throw new InvalidArgumentError(`env factory module ${JSON.stringify(factory.module)}: cannot import it (${err instanceof Error ? err.message : String(err)})`);
  }
  const fn = mod[factory.export];
  if (typeof fn !== "function") {
    throw new InvalidArgumentError(`env factory export: module ${JSON.stringify(factory.module)} has no function export ${JSON.stringify(factory.export)}`);
  }
  return () => (fn as (options: JSONValue | undefined) => SpecifiedEnv)(factory.options);
}
