// Training on multi-turn tool episodes through real workers: ArithmeticToolEnv (a calculator tool, a turn limit)
// collected by LLMCollector (yieldCompletedTrajectories), advantages from MCAdvantage (trajectoryReturn "sum"), batches
// from trajectoryBatch, and the Trainer with GRPOLoss({ maskingStrategy: "rlhf" }). The loss mask holds the
// assistant's tokens only (checked token by token, and through the worker's loss), in both layouts, and the tiny
// random model learns to use the calculator: its mean reward rises from about 0.01 to about 0.4 in 80 steps (about
// 30 s on 2 CPU cores).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ArithmeticToolEnv,
  GRPOLoss,
  InvalidArgumentError,
  LLMCollector,
  MCAdvantage,
  RaggedTensor,
  Tensor,
  Trainer,
  trajectoryBatch,
  TransformersWrapper,
  type TensorDict,
  type WorkerClient,
} from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";
import { ScriptedPolicy } from "./tools.helpers.js";

const SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"];

/** The tiny model's tokens of an ASCII text: one per character, one per special token. */
function tinyTokens(text: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; ) {
    const special = SPECIAL_TOKENS.find((s) => text.startsWith(s, i));
    out.push(special ?? text[i]!);
    i += special?.length ?? 1;
  }
  return out;
}

/** Per row: the text of the tokens where `mask` is true, each masked run ending with "|". */
function maskedText(batch: TensorDict, mask: readonly number[][]): string[] {
  return batch.getStrings(["text", "full"]).map((text, r) => {
    const tokens = tinyTokens(text);
    expect(tokens.length).toBe(mask[r]!.length);
    return tokens.map((t, i) => (mask[r]![i] ? t + (mask[r]![i + 1] ? "" : "|") : "")).join("");
  });
}

function raggedRows(batch: TensorDict, key: string[]): number[][] {
  const ragged = batch.getRagged(key);
  return Array.from({ length: ragged.rows }, (_, r) => ragged.row(r).toNumbers());
}

/** `("log_probs", "full")` with `delta` added where `where(maskValue)` holds. */
function shiftedLogProbs(batch: TensorDict, delta: number, where: (masked: boolean) => boolean): TensorDict {
  const mask = raggedRows(batch, ["masks", "all_assistant_mask"]);
  const rows = raggedRows(batch, ["log_probs", "full"]).map((lp, r) =>
    Tensor.from(Float32Array.from(lp, (v, i) => (where(mask[r]![i] === 1) ? v + delta : v)), { dtype: "float32" }),
  );
  return batch.exclude(["log_probs", "full"]).set(["log_probs", "full"], RaggedTensor.fromRows(rows));
}

/** Collects with `collector` until `count` trajectories are done, through `mc`; the groups it completed. */
async function collectGroups(collector: LLMCollector, mc: MCAdvantage, count: number): Promise<TensorDict[]> {
  const groups: TensorDict[] = [];
  let trajectories = 0;
  for await (const batch of collector) {
    const group = mc.inv(batch);
    if (group !== null) {
      groups.push(group);
      trajectories += group.getTensor(["next", "done"]).toNumbers().filter((d) => d !== 0).length;
    }
    if (trajectories >= count) break;
  }
  return groups;
}

describe("training on multi-turn tool episodes", () => {
  let setup: TinyPolicy;
  let worker: WorkerClient;

  beforeAll(async () => {
    // One torch thread: the steps take as long on an idle 2-core machine, and far less when other test files run
    // workers beside this one (spinning thread pools oversubscribe the cores); results do not depend on the core count.
    setup = await startTinyPolicy(0, { OMP_NUM_THREADS: "1", MKL_NUM_THREADS: "1" });
    worker = setup.worker;
  });

  afterAll(async () => {
    await setup.close();
  });

  it("masks the assistant's tokens only: tool, user and system tokens are outside the loss", async () => {
    // Row 0 presses "=" and copies the calculator's answer (2 turns); row 1 answers a wrong number at once (1 turn).
    const policy = new ScriptedPolicy((turn, prompt, row) => {
      if (row === 1) return "0";
      return turn === 0 ? "=" : (prompt.messages.findLast((m) => m.role === "tool")?.content.split("\n")[1] ?? "?");
    });
    const env = new ArithmeticToolEnv({ maxTurns: 3, batchSize: [2], repeats: 2, seed: 0, maxOperand: 9, systemPrompt: "Use the calculator." });
    const collector = new LLMCollector({ env, policy, yieldCompletedTrajectories: true, dialogTurnsPerBatch: 3 });
    const mc = new MCAdvantage({ groupSize: 2, trajectoryReturn: "sum" });
    const [group] = await collectGroups(collector, mc, 2);
    await collector.close();

    const batch = await trajectoryBatch(group!, { worker, model: "policy" });
    expect(batch.batchSize).toEqual([2]);
    // MCAdvantage gives the group in the order its trajectories ended: row 1's (one turn) first.
    expect(batch.getTensor("num_turns").toNumbers()).toEqual([1, 2]);
    const histories = batch.getHistory(["history", "full"]).rows;
    const value = group!.getStrings("answer")[0]!;
    expect(histories.map((h) => h.messages.map((m) => m.role))).toEqual([
      ["system", "user", "assistant"],
      ["system", "user", "assistant", "tool", "assistant"],
    ]);
    expect(histories[1]!.at(-1)!.content).toBe(value);
    expect(batch.getTensor("return").toNumbers()).toEqual([expect.closeTo(0.1, 6) as number, 1]);
    // MCAdvantage's trajectory advantages: ±1/√2 for a group of two returns.
    const [a0, a1] = batch.getTensor("advantage").toNumbers();
    expect(a0).toBeCloseTo(-Math.SQRT1_2, 5);
    expect(a1).toBeCloseTo(Math.SQRT1_2, 5);
    // Token by token: the mask holds each assistant turn's words and its end-of-turn token, nothing else.
    const mask = raggedRows(batch, ["masks", "all_assistant_mask"]);
    expect(maskedText(batch, mask)).toEqual(["0<|im_end|>|", `=<|im_end|>|${value}<|im_end|>|`]);
    expect(batch.getStrings(["text", "full"])[1]).toContain(`<|im_start|>tool\nTool calc executed successfully:\n${value}<|im_end|>`);
    expect(raggedRows(batch, ["log_probs", "full"]).map((r) => r.length)).toEqual(mask.map((r) => r.length));

    // Through the worker's loss: the old log-probs of tokens outside the mask change nothing, inside they do.
    const trainer = await Trainer.create(worker, { model: "policy", loss: new GRPOLoss({ maskingStrategy: "rlhf", entropyCoeff: 0 }), replace: true });
    const base = (await trainer.computeLoss(batch)).metrics;
    const outside = (await trainer.computeLoss(shiftedLogProbs(batch, 3, (masked) => !masked))).metrics;
    const inside = (await trainer.computeLoss(shiftedLogProbs(batch, -0.5, (masked) => masked))).metrics;
    for (const key of ["loss", "loss_objective", "kl_approx", "clip_fraction"]) expect(outside[key], key).toBeCloseTo(base[key]!, 6);
    expect(Math.abs(inside.loss! - base.loss!)).toBeGreaterThan(1e-3);
    await trainer.close();
  });

  it("in the turns layout, each row masks the response its step generated", async () => {
    const env = new ArithmeticToolEnv({ maxTurns: 2, batchSize: [4], repeats: 2, seed: 1, maxOperand: 9, systemPrompt: null });
    const model = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 3, seed: 5 } });
    const collector = new LLMCollector({ env, policy: model, yieldCompletedTrajectories: true, dialogTurnsPerBatch: 4 });
    const mc = new MCAdvantage({ groupSize: 2, trajectoryReturn: "sum" });
    const groups = await collectGroups(collector, mc, 4);
    await collector.close();
    const steps = groups.reduce((n, g) => n + g.numel(), 0);
    const batch = await trajectoryBatch(groups, { layout: "turns" });
    expect(batch.batchSize).toEqual([steps]);
    const mask = raggedRows(batch, ["masks", "all_assistant_mask"]);
    const prompts = groups.flatMap((g) => raggedRows(g, ["tokens", "prompt"]).map((p) => p.length));
    const responses = groups.flatMap((g) => raggedRows(g, ["tokens", "response"]).map((p) => p.length));
    mask.forEach((row, r) => {
      expect(row.slice(0, prompts[r]).every((m) => m === 0)).toBe(true);
      expect(row.slice(prompts[r]).every((m) => m === 1)).toBe(true);
      expect(row.length).toBe(prompts[r]! + responses[r]!);
    });
    // One advantage per trajectory, repeated on its steps.
    const perRow = batch.getTensor("advantage").toNumbers();
    const turns = batch.getTensor("num_turns").toNumbers();
    let r = 0;
    while (r < perRow.length) {
      expect(perRow.slice(r, r + turns[r]!).every((a) => a === perRow[r])).toBe(true);
      r += turns[r]!;
    }
  });

  it("rejects batches it cannot build, naming what is missing", async () => {
    const env = new ArithmeticToolEnv({ maxTurns: 1, batchSize: [2], repeats: 2, systemPrompt: null });
    const collector = new LLMCollector({ env, policy: new ScriptedPolicy(() => "1"), yieldCompletedTrajectories: true, dialogTurnsPerBatch: 2 });
    let steps: TensorDict | undefined;
    for await (const b of collector) {
      steps = b;
      break;
    }
    await collector.close();
    await expect(trajectoryBatch(steps!, { worker, model: "policy" })).rejects.toThrow(/trajectory 0 has no "advantage"; write the steps through MCAdvantage/);
    await expect(trajectoryBatch(steps!, { advantages: [1, -1] })).rejects.toThrow(/options\.worker: required with layout "conversation"/);
    await expect(trajectoryBatch(steps!, { layout: "turns", advantages: [1, -1] })).rejects.toThrow(/\("tokens", "full"\)/);
    await expect(trajectoryBatch(steps!, { worker, model: "policy", advantages: [1] })).rejects.toThrow(InvalidArgumentError);
  });

  it(
    "raises the mean reward: the tiny random model learns to call the calculator and answer",
    async () => {
      await worker.loadModel({ name: "policy", path: setup.tiny.path, replace: true }); // fresh weights
      const STEPS = 80;
      const env = new ArithmeticToolEnv({
        maxTurns: 2,
        operations: ["+"],
        minOperand: 1,
        maxOperand: 4,
        repeats: 8,
        batchSize: [64],
        seed: 0,
        systemPrompt: null,
        toolReward: 0.2,
      });
      const model = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 2 } });
      let calls = 0;
      const policy = (td: TensorDict): Promise<TensorDict> => model.forward(td, { seed: 1000 + calls++ });
      const collector = new LLMCollector({ env, policy, yieldCompletedTrajectories: true, dialogTurnsPerBatch: 64, trackPolicyVersion: true });
      const trainer = await Trainer.create(worker, {
        model: "policy",
        loss: new GRPOLoss({ maskingStrategy: "rlhf", entropyCoeff: 0 }),
        optimizer: { type: "adamw", lr: 4e-3, weightDecay: 0 },
        replace: true,
      });
      const mc = new MCAdvantage({ groupSize: 8, trajectoryReturn: "sum" });
      const rewards: number[] = [];
      const toolUse: number[] = [];
      const success: number[] = [];
      const started = performance.now();
      for (let step = 0; step < STEPS; step++) {
        const groups = await collectGroups(collector, mc, 64);
        // Rewards come at the step that ends an episode: their sum over the done steps is the mean return.
        const ended = groups.flatMap((g) => g.getTensor(["next", "done"]).toNumbers());
        const reward = groups.flatMap((g) => g.getTensor(["next", "reward"]).toNumbers());
        const used = groups.flatMap((g) => g.getTensor(["next", "used_tool"]).toNumbers());
        const right = groups.flatMap((g) => g.getTensor(["next", "success"]).toNumbers());
        const episodes = ended.filter((d) => d !== 0).length;
        rewards.push(reward.reduce((a, b) => a + b, 0) / episodes);
        toolUse.push(used.filter((u, i) => u !== 0 && ended[i] !== 0).length / episodes);
        success.push(right.filter((u) => u !== 0).length / episodes);
        // The turns layout trains on the tokens the model sampled. The conversation layout re-encodes the text, and the
        // tiny model's stray bytes (half its vocabulary, not UTF-8) come back as other tokens: learning from scratch is
        // then noisier and can collapse into those bytes (docs/collectors.md).
        const batch = await trajectoryBatch(groups, { layout: "turns" });
        await trainer.step(batch);
        await collector.updatePolicyWeights();
      }
      await collector.close();
      const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
      const [first, last] = [mean(rewards.slice(0, 5)), mean(rewards.slice(-5))];
      console.log(
        `tool training: ${STEPS} steps in ${((performance.now() - started) / 1000).toFixed(1)} s; mean reward ${first.toFixed(3)} (first 5 steps) → ` +
          `${last.toFixed(3)} (last 5); calculator use ${mean(toolUse.slice(0, 5)).toFixed(2)} → ${mean(toolUse.slice(-5)).toFixed(2)}; ` +
          `right answers ${mean(success.slice(0, 5)).toFixed(2)} → ${mean(success.slice(-5)).toFixed(2)}; per 10 steps ` +
          Array.from({ length: STEPS / 10 }, (_, k) => mean(rewards.slice(k * 10, k * 10 + 10)).toFixed(2)).join(" "),
      );
      expect(first).toBeLessThan(0.05);
      expect(last).toBeGreaterThan(first + 0.15);
      expect(mean(toolUse.slice(-5))).toBeGreaterThan(0.5);
      expect(mean(success.slice(-5))).toBeGreaterThan(mean(success.slice(0, 5)));
    },
    240_000,
  );
});
