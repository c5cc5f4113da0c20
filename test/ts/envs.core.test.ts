// Env core semantics: reset/step/stepMdp/stepAndMaybeReset/rollout, done keys, partial resets, StepCounter,
// Compose ordering, TransformedEnv, batched envs and bad inputs. A small counting env stands in for a real one.
import { describe, expect, it } from "vitest";
import {
  appendTransform,
  BatchSizeMismatchError,
  Compose,
  EnvBase,
  EnvStateError,
  InvalidArgumentError,
  StepCounter,
  Tensor,
  TensorDict,
  Transform,
  TransformedEnv,
  markDone,
  readFlags,
  type EnvCallOptions,
} from "../../sdk/index.js";

/** obs starts at `start`; each step adds the action to it; terminated once obs >= target; reward = action. */
class CountEnv extends EnvBase {
  resets = 0;

  constructor(
    batchSize: number[],
    private readonly target = 100,
    private readonly start = 0,
  ) {
    super({ batchSize });
  }

  override get actionKeys(): readonly string[] {
    return ["action"];
  }

  protected override _reset(td: TensorDict): Promise<TensorDict> {
    this.resets++;
    const out = td.exclude("next");
    out.set("obs", Tensor.full("float32", [...this.batchSize, 1], this.start));
    return Promise.resolve(out);
  }

  protected override _step(td: TensorDict): Promise<TensorDict> {
    const obs = td.getTensor("obs").toNumbers();
    const action = td.getTensor("action").toNumbers();
    const next = obs.map((o, i) => o + action[i]!);
    const out = new TensorDict(
      {
        obs: Tensor.from(Float32Array.from(next), { dtype: "float32", shape: [...this.batchSize, 1] }),
        reward: Tensor.from(Float32Array.from(action), { dtype: "float32", shape: [...this.batchSize, 1] }),
      },
      { batchSize: this.batchSize },
    );
    markDone(out, next.map((v) => v >= this.target));
    return Promise.resolve(out);
  }
}

/** A policy adding `action` = the row index + 1 (so rows move at different speeds). */
const rowPolicy = (td: TensorDict): TensorDict => {
  const rows = td.numel();
  return td.set("action", Tensor.from(Float32Array.from({ length: rows }, (_, i) => i + 1), { dtype: "float32", shape: [...td.batchSize, 1] }));
};

const flags = (td: TensorDict, key: string | string[]): boolean[] => readFlags(td, key);

describe("EnvBase", () => {
  it("reset gives the observation and false done keys of shape [...batch, 1]", async () => {
    const env = new CountEnv([3]);
    const td = await env.reset();
    expect(td.batchSize).toEqual([3]);
    for (const key of ["done", "terminated", "truncated"]) {
      expect(td.getTensor(key, "bool").shape).toEqual([3, 1]);
      expect(flags(td, key)).toEqual([false, false, false]);
    }
    expect(td.getTensor("obs").toNumbers()).toEqual([0, 0, 0]);
  });

  it("step sets next in place with consistent done keys; stepMdp moves next to the root", async () => {
    const env = new CountEnv([2], 2);
    const td = rowPolicy(await env.reset());
    const stepped = await env.step(td);
    expect(stepped).toBe(td); // in place, as TorchRL
    expect(stepped.getTensor(["next", "obs"]).toNumbers()).toEqual([1, 2]);
    expect(stepped.getTensor(["next", "reward"], "float32").shape).toEqual([2, 1]);
    expect(flags(stepped, ["next", "terminated"])).toEqual([false, true]);
    expect(flags(stepped, ["next", "truncated"])).toEqual([false, false]);
    expect(flags(stepped, ["next", "done"])).toEqual([false, true]);
    const next = env.stepMdp(stepped);
    expect(next.has("next")).toBe(false);
    expect(next.has("action")).toBe(false);
    expect(next.has("reward")).toBe(false);
    expect(next.getTensor("obs").toNumbers()).toEqual([1, 2]);
    expect(flags(next, "done")).toEqual([false, true]);
  });

  it("stepAndMaybeReset resets only the rows that are done", async () => {
    const env = new TransformedEnv(new CountEnv([3], 3), new StepCounter());
    const [stepped, first] = await env.stepAndMaybeReset(rowPolicy(await env.reset()));
    let td = first;
    // Row 2 moved by 3 and is done: it restarts at 0 with step_count 0; rows 0 and 1 go on.
    expect(flags(stepped, ["next", "done"])).toEqual([false, false, true]);
    expect(td.getTensor("obs").toNumbers()).toEqual([1, 2, 0]);
    expect(td.getTensor("step_count").toNumbers()).toEqual([1, 1, 0]);
    expect(flags(td, "done")).toEqual([false, false, false]);
    expect(td.has("_reset")).toBe(false);
    [, td] = await env.stepAndMaybeReset(rowPolicy(td));
    expect(td.getTensor("obs").toNumbers()).toEqual([2, 0, 0]);
    expect(td.getTensor("step_count").toNumbers()).toEqual([2, 0, 0]);
  });

  it("a reset mask with no row set changes nothing", async () => {
    const env = new CountEnv([2]);
    const td = await env.reset();
    env.resets = 0;
    td.set("_reset", Tensor.zeros("bool", [2, 1]));
    const out = await env.reset(td);
    expect(env.resets).toBe(0);
    expect(out.has("_reset")).toBe(false);
  });

  it("StepCounter counts steps and truncates at maxSteps", async () => {
    const env = new TransformedEnv(new CountEnv([2]), new StepCounter({ maxSteps: 2 }));
    let td = await env.reset();
    expect(td.getTensor("step_count", "int64").shape).toEqual([2, 1]);
    td = await env.step(rowPolicy(td));
    expect(td.getTensor(["next", "step_count"]).toNumbers()).toEqual([1, 1]);
    expect(flags(td, ["next", "truncated"])).toEqual([false, false]);
    td = await env.step(rowPolicy(env.stepMdp(td)));
    expect(td.getTensor(["next", "step_count"]).toNumbers()).toEqual([2, 2]);
    expect(flags(td, ["next", "truncated"])).toEqual([true, true]);
    expect(flags(td, ["next", "terminated"])).toEqual([false, false]);
    expect(flags(td, ["next", "done"])).toEqual([true, true]);
  });

  it("rollout stacks steps along a new last dimension and stops when a row is done", async () => {
    const env = new TransformedEnv(new CountEnv([2], 4), new StepCounter());
    const out = await env.rollout(10, rowPolicy);
    // Row 1 moves by 2 per step: done after step 2.
    expect(out.batchSize).toEqual([2, 2]);
    expect(out.getTensor(["next", "obs"]).toNumbers()).toEqual([1, 2, 2, 4]);
    expect(out.getTensor("step_count").toNumbers()).toEqual([0, 1, 0, 1]);
    expect(out.getTensor(["next", "reward"]).shape).toEqual([2, 2, 1]);
  });

  it("rollout without break options resets done rows and runs maxSteps steps", async () => {
    const env = new CountEnv([2], 2);
    const policy = { forward: (td: TensorDict) => Promise.resolve(rowPolicy(td)) };
    const out = await env.rollout(3, policy, { breakWhenAnyDone: false });
    expect(out.batchSize).toEqual([2, 3]);
    // Row 0 is done after step 2 and starts again; row 1 reaches 2 at every step, being reset after each one.
    expect(out.getTensor(["next", "obs"]).toNumbers()).toEqual([1, 2, 1, 2, 2, 2]);
    expect(out.getTensor("obs").toNumbers()).toEqual([0, 1, 0, 0, 0, 0]);
  });

  it("rollout breakWhenAllDone waits for every row; setTruncated marks the last step", async () => {
    const env = new CountEnv([2], 2);
    const all = await env.rollout(5, rowPolicy, { breakWhenAnyDone: false, breakWhenAllDone: true });
    expect(all.batchSize).toEqual([2, 2]);
    const far = new CountEnv([1], 100);
    const cut = await far.rollout(3, rowPolicy, { setTruncated: true });
    expect(cut.batchSize).toEqual([1, 3]);
    expect(flags(cut, ["next", "truncated"])).toEqual([false, false, true]);
    expect(flags(cut, ["next", "done"])).toEqual([false, false, true]);
  });

  it("rollout leaves out the keys that only some steps have", async () => {
    class Extra extends Transform {
      override step(td: TensorDict, next: TensorDict): TensorDict {
        return next.set("extra", Tensor.ones("float32", [...next.batchSize, 1]));
      }
    }
    // stepMdp carries "extra" to the root from the second step on; the first step's root lacks it.
    const out = await new TransformedEnv(new CountEnv([2]), new Extra()).rollout(3, rowPolicy);
    expect(out.batchSize).toEqual([2, 3]);
    expect(out.has(["next", "extra"])).toBe(true);
    expect(out.has("extra")).toBe(false);
  });

  it("works with a multi-dimensional batch", async () => {
    const env = new TransformedEnv(new CountEnv([2, 3], 100), new StepCounter({ maxSteps: 2 }));
    const out = await env.rollout(5, rowPolicy);
    expect(out.batchSize).toEqual([2, 3, 2]);
    expect(out.getTensor(["next", "done"]).shape).toEqual([2, 3, 2, 1]);
    expect(out.getTensor(["next", "obs"]).toNumbers()).toEqual([1, 2, 2, 4, 3, 6, 4, 8, 5, 10, 6, 12]);
  });

  it("rejects TensorDicts of another batch size, bad options and stepMdp before step", async () => {
    const env = new CountEnv([2]);
    await expect(env.reset(new TensorDict({}, { batchSize: [3] }))).rejects.toThrow(BatchSizeMismatchError);
    const td = await env.reset();
    await expect(env.step(td.index({ start: 0, stop: 1 }))).rejects.toThrow(/batch size \[1\]/);
    expect(() => env.stepMdp(td)).toThrow(EnvStateError);
    await expect(env.rollout(0, rowPolicy)).rejects.toThrow(/rollout maxSteps/);
    await expect(env.rollout(2, rowPolicy, { breakWhenAnyDone: "yes" as unknown as boolean })).rejects.toThrow(/options\.breakWhenAnyDone/);
    await expect(env.rollout(2, rowPolicy, { autoReset: false })).rejects.toThrow(/options\.tensordict/);
    await expect(env.rollout(2, 42 as unknown as typeof rowPolicy)).rejects.toThrow(InvalidArgumentError);
    expect(() => new CountEnv([-1])).toThrow(/CountEnv options\.batchSize/);
    expect(() => new StepCounter({ maxSteps: 0 })).toThrow(/StepCounter options\.maxSteps/);
  });

  it("an aborted signal stops reset, step and rollout with ABORTED", async () => {
    const env = new TransformedEnv(new CountEnv([1]), new StepCounter());
    const ac = new AbortController();
    ac.abort();
    await expect(env.reset(undefined, { signal: ac.signal })).rejects.toMatchObject({ code: "ABORTED" });
    await expect(env.rollout(3, rowPolicy, { signal: ac.signal })).rejects.toMatchObject({ code: "ABORTED" });
  });
});

/** Records each hook call as `name.hook`, and adds `name` to a string leaf in `inv` (so the order shows). */
class Recorder extends Transform {
  constructor(
    private readonly name: string,
    private readonly log: string[],
  ) {
    super();
  }

  override beforeReset(td: TensorDict, options: EnvCallOptions): TensorDict {
    this.log.push(`${this.name}.beforeReset`);
    return super.beforeReset(td, options) as TensorDict;
  }

  override reset(td: TensorDict, tdReset: TensorDict): TensorDict {
    this.log.push(`${this.name}.reset`);
    return tdReset;
  }

  override async inv(td: TensorDict): Promise<TensorDict> {
    await new Promise((r) => setTimeout(r, 1));
    this.log.push(`${this.name}.inv`);
    return td;
  }

  override step(td: TensorDict, next: TensorDict): TensorDict {
    this.log.push(`${this.name}.step`);
    return next.set(`seen_${this.name}`, Tensor.ones("float32", [...next.batchSize, 1]));
  }
}

describe("Transform, Compose, TransformedEnv", () => {
  it("Compose runs beforeReset/reset/step in order and inv in reverse", async () => {
    const log: string[] = [];
    const env = new TransformedEnv(new CountEnv([1]), new Compose(new Recorder("a", log), new Recorder("b", log)));
    const td = await env.reset();
    expect(log).toEqual(["a.beforeReset", "b.beforeReset", "a.reset", "b.reset"]);
    log.length = 0;
    const stepped = await env.step(rowPolicy(td));
    expect(log).toEqual(["b.inv", "a.inv", "a.step", "b.step"]);
    expect(stepped.has(["next", "seen_a"])).toBe(true);
    expect(stepped.has(["next", "seen_b"])).toBe(true);
  });

  it("appendTransform wraps a plain env, appends to a TransformedEnv, and nesting flattens", async () => {
    const log: string[] = [];
    const base = new CountEnv([1]);
    const env = appendTransform(base, new Recorder("a", log));
    expect(env).toBeInstanceOf(TransformedEnv);
    expect(appendTransform(env, new Recorder("b", log))).toBe(env);
    const outer = new TransformedEnv(env, new Recorder("c", log));
    expect(outer.baseEnv).toBe(base);
    expect(outer.transform.length).toBe(3);
    expect(outer.transform.at(0)?.parent).toBe(outer);
    await outer.reset();
    expect(log.filter((l) => l.endsWith(".reset"))).toEqual(["a.reset", "b.reset", "c.reset"]);
    expect(outer.transform.find(Recorder)).toBe(outer.transform.at(0));
  });

  it("rejects a non-Transform and a transform that changes the batch size", async () => {
    expect(() => new Compose(JSON.parse("{}") as Transform)).toThrow(/Compose: transforms\[0\]/);
    expect(() => new TransformedEnv(JSON.parse("{}") as EnvBase)).toThrow(InvalidArgumentError);
    class Shrink extends Transform {
      override reset(td: TensorDict, tdReset: TensorDict): TensorDict {
        return tdReset.index({ start: 0, stop: 1 });
      }
    }
    const env = new TransformedEnv(new CountEnv([2]), new Shrink());
    await expect(env.reset()).rejects.toThrow(/Shrink\.reset returned batch size \[1\]/);
  });
});
