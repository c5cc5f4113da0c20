// SyncDataCollector over a SerialEnv of CartPoles with a seeded TS policy (no worker): batch layout [N, T] and its
// env-major rows, auto-reset across episode boundaries, episode statistics against the batch's own rewards and done
// flags, totalFrames, an abort or a failing policy mid-batch, and the option checks.
import { describe, expect, it } from "vitest";
import { CollectorStateError, SyncDataCollector } from "../../sdk/collectors/index.js";
import { CartPoleEnv } from "../../sdk/envs/index.js";
import { SerialEnv } from "../../sdk/envs/serial-env.js";
import { InvalidArgumentError, Tensor, type TensorDict } from "../../sdk/tensordict/index.js";

/** A seeded coin-flip policy for N copies (xorshift, so two runs draw the same actions). */
function coinPolicy(seed: number): (td: TensorDict) => TensorDict {
  let s = seed >>> 0 || 1;
  return (td) => {
    const n = td.batchSize[0]!;
    const actions = Array.from({ length: n }, () => {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      return (s >>> 0) % 2;
    });
    td.set("action", Tensor.from(actions, { dtype: "int64" }));
    return td;
  };
}

function cartPoles(n: number, seed: number): SerialEnv {
  const env = new SerialEnv(n, () => new CartPoleEnv());
  env.setSeed(seed);
  return env;
}

describe("SyncDataCollector", () => {
  it("yields [N, T] batches across episode boundaries and counts the finished episodes", async () => {
    await using env = cartPoles(4, 7);
    const collector = new SyncDataCollector({ env, policy: coinPolicy(1), framesPerBatch: 400, totalFrames: 1200 });
    expect(collector.stepsPerBatch).toBe(100);
    const batches: TensorDict[] = [];
    for await (const batch of collector) batches.push(batch);
    expect(batches).toHaveLength(3);
    expect(collector.frames).toBe(1200);
    for (const b of batches) {
      expect(b.batchSize).toEqual([4, 100]);
      expect(b.getTensor("observation").shape).toEqual([4, 100, 4]);
      expect(b.getTensor(["next", "reward"]).shape).toEqual([4, 100, 1]);
    }
    // episodes from the batches themselves: per copy, the rewards summed up to each done step
    const expected: { env: number; return: number; length: number }[] = [];
    const running = [0, 0, 0, 0];
    const steps = [0, 0, 0, 0];
    for (const b of batches) {
      const rewards = b.getTensor(["next", "reward"]).toNumbers();
      const done = b.getTensor(["next", "done"]).toNumbers();
      // the observation after a done step is a fresh reset: |x| <= 0.05 for every state variable
      const obs = b.getTensor("observation").toNumbers();
      for (let t = 0; t < 100; t++) {
        for (let i = 0; i < 4; i++) {
          const row = i * 100 + t;
          running[i]! += rewards[row]!;
          steps[i]! += 1;
          if (done[row] === 1) {
            expected.push({ env: i, return: running[i]!, length: steps[i]! });
            running[i] = 0;
            steps[i] = 0;
            if (t + 1 < 100) for (let k = 0; k < 4; k++) expect(Math.abs(obs[(row + 1) * 4 + k]!)).toBeLessThanOrEqual(0.05);
          }
        }
      }
    }
    const finished = collector.takeFinishedEpisodes();
    expect(finished.length).toBeGreaterThan(10); // a coin-flip policy drops the pole in ~22 steps
    expect([...finished].sort((a, b) => a.env - b.env || a.length - b.length)).toEqual(
      [...expected].sort((a, b) => a.env - b.env || a.length - b.length),
    );
    expect(collector.takeFinishedEpisodes()).toEqual([]);
  });

  it("reshapes to env-major rows (row = env * T + t), as ControlAgent.update takes them", async () => {
    await using env = cartPoles(3, 0);
    const collector = new SyncDataCollector({ env, policy: coinPolicy(2), framesPerBatch: 30 });
    const batch = await collector.next();
    const rows = batch.reshape([30]);
    const flat = rows.getTensor("observation").toNumbers();
    // the second row is env 0's second step: its observation is env 0's first next observation
    expect(flat.slice(4, 8)).toEqual(batch.getTensor(["next", "observation"]).toNumbers().slice(0, 4));
  });

  it("same seeds, same batches; an unbatched env counts as one copy", async () => {
    const collect = async (): Promise<number[]> => {
      await using env = cartPoles(2, 5);
      return (await new SyncDataCollector({ env, policy: coinPolicy(3), framesPerBatch: 64 }).next()).getTensor(["next", "observation"]).toNumbers();
    };
    expect(await collect()).toEqual(await collect());
    const single = new CartPoleEnv();
    single.setSeed(0);
    const batch = await new SyncDataCollector({ env: single, policy: (td) => td.set("action", Tensor.from(1, { dtype: "int64" })), framesPerBatch: 5 }).next();
    expect(batch.batchSize).toEqual([1, 5]);
  });

  it("an abort mid-batch is ABORTED and drops the partial batch; a concurrent next() is refused", async () => {
    await using env = cartPoles(2, 1);
    const controller = new AbortController();
    const coin = coinPolicy(4);
    let calls = 0;
    const policy = (td: TensorDict): TensorDict => {
      if (++calls === 5) controller.abort(); // in the middle of the first batch (10 steps per copy)
      return coin(td);
    };
    const collector = new SyncDataCollector({ env, policy, framesPerBatch: 20, signal: controller.signal });
    await expect(collector.next()).rejects.toMatchObject({ code: "ABORTED" });
    expect(calls).toBe(5);
    expect(collector.frames).toBe(0);

    const free = new SyncDataCollector({ env, policy: coinPolicy(5), framesPerBatch: 20 });
    const first = free.next();
    await expect(free.next()).rejects.toBeInstanceOf(CollectorStateError);
    expect((await first).batchSize).toEqual([2, 10]);
    expect(free.frames).toBe(20);
  });

  it("a policy that throws mid-batch drops that batch; the next one goes on from the env's state", async () => {
    await using env = cartPoles(2, 2);
    const coin = coinPolicy(6);
    let calls = 0;
    const policy = (td: TensorDict): TensorDict => {
      if (++calls === 3) throw new Error("policy failed");
      return coin(td);
    };
    const collector = new SyncDataCollector({ env, policy, framesPerBatch: 20 });
    await expect(collector.next()).rejects.toThrow("policy failed");
    expect(collector.frames).toBe(0);
    expect((await collector.next()).batchSize).toEqual([2, 10]);
    expect(collector.frames).toBe(20);
  });

  it("refuses options that do not fit, naming the field", async () => {
    await using env = cartPoles(4, 0);
    const policy = coinPolicy(0);
    expect(() => new SyncDataCollector({ env, policy, framesPerBatch: 10 })).toThrow(InvalidArgumentError);
    expect(() => new SyncDataCollector({ env, policy, framesPerBatch: 10 })).toThrow(/options\.framesPerBatch: must be a multiple of the env's 4 copies, got 10/);
    expect(() => new SyncDataCollector({ env, policy, framesPerBatch: 8, totalFrames: 12 })).toThrow(/options\.totalFrames: must be -1 or a multiple of framesPerBatch \(8\), got 12/);
    expect(() => new SyncDataCollector({ env, policy: 3 as never, framesPerBatch: 8 })).toThrow(/options\.policy: expected a policy/);
  });
});
