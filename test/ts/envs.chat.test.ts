// ChatEnv in its three input modes driven by a real tiny-model worker through TransformersWrapper, multi-turn
// rollouts, DatasetChatEnv with rewards and partial resets, PolicyVersion and AddThinkingPrompt.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AddThinkingPrompt,
  ChatEnv,
  DatasetChatEnv,
  EnvStateError,
  HistoryBatch,
  InvalidArgumentError,
  PolicyVersion,
  StepCounter,
  Tensor,
  TensorDict,
  TransformedEnv,
  TransformersWrapper,
  readFlags,
  replaceLastAnswer,
  type WorkerClient,
} from "../../sdk/index.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

const jsonl = join(import.meta.dirname, "..", "fixtures", "datasets", "arith.jsonl");
const queries = (): TensorDict => new TensorDict({ query: ["2+2?", "Hi"] }, { batchSize: [2] });

describe("ChatEnv with a real policy", () => {
  let setup: TinyPolicy;
  let worker: WorkerClient;

  beforeAll(async () => {
    setup = await startTinyPolicy(11);
    worker = setup.worker;
  });

  afterAll(async () => {
    await setup.close();
  });

  const policy = (inputMode: "history" | "text" | "tokens", seed = 0): TransformersWrapper =>
    new TransformersWrapper(worker, { model: "policy", inputMode, generateKwargs: { max_new_tokens: 4, seed } });

  it("history mode: a two-turn rollout, each next prompt being the full conversation", async () => {
    const env = new TransformedEnv(new ChatEnv({ batchSize: [2], systemPrompt: "Be brief." }), new StepCounter({ maxSteps: 2 }));
    const out = await env.rollout(5, policy("history"), { tensordict: queries() });
    expect(out.batchSize).toEqual([2, 2]);
    const flat = out.reshape([4]);
    const prompt = flat.getHistory(["history", "prompt"]);
    const full = flat.getHistory(["history", "full"]);
    const nextPrompt = flat.getHistory(["next", "history", "prompt"]);
    expect(prompt.row(0).messages.map((m) => m.role)).toEqual(["system", "user"]);
    expect(prompt.row(0).at(1)?.content).toBe("2+2?");
    for (let i = 0; i < 4; i++) expect(nextPrompt.row(i).equals(full.row(i))).toBe(true);
    // Row-major [env, time]: step 1 of env 0 starts from step 0's full conversation.
    expect(prompt.row(1).equals(full.row(0))).toBe(true);
    expect(full.row(1).length).toBe(4);
    expect(readFlags(out, ["next", "truncated"])).toEqual([false, true, false, true]);
    expect(out.getTensor("step_count").toNumbers()).toEqual([0, 1, 0, 1]);
  });

  it("text mode: prompts rendered in TS or by the worker's template agree, and step extends the text", async () => {
    const ts = new ChatEnv({ batchSize: [2], inputMode: "text", systemPrompt: "Be brief." });
    const viaWorker = new ChatEnv({ batchSize: [2], inputMode: "text", systemPrompt: "Be brief.", tokenizer: { worker, model: "policy" } });
    const a = await ts.reset(queries());
    const b = await viaWorker.reset(queries());
    expect(a.getStrings(["text", "prompt"])).toEqual(b.getStrings(["text", "prompt"]));
    expect(a.getStrings(["text", "prompt"])[1]).toBe("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    const stepped = await ts.step(await policy("text").forward(a));
    const fullText = stepped.getStrings(["text", "full"]);
    expect(stepped.getStrings(["next", "text", "prompt"])).toEqual(fullText);
    expect(fullText[0]!.startsWith(a.getStrings(["text", "prompt"])[0]!)).toBe(true);
    expect(fullText[0]!.length).toBeGreaterThan(a.getStrings(["text", "prompt"])[0]!.length);
  });

  it("tokens mode: the worker tokenizes the prompt, and step makes the full tokens the next prompt", async () => {
    const env = new ChatEnv({ batchSize: [2], inputMode: "tokens", tokenizer: { worker, model: "policy" } });
    const td = await env.reset(queries());
    const tokens = td.getRagged(["tokens", "prompt"], "int64");
    expect(tokens.row(0).toArray()[0]).toBe(257n); // "<|im_start|>", a special token of the tiny tokenizer
    const out = await env.rollout(2, policy("tokens", 3), { tensordict: queries(), breakWhenAnyDone: false });
    expect(out.batchSize).toEqual([2, 2]);
    const flat = out.reshape([4]);
    const full = flat.getRagged(["tokens", "full"]);
    const nextPrompt = flat.getRagged(["next", "tokens", "prompt"]);
    const prompt = flat.getRagged(["tokens", "prompt"]);
    expect(nextPrompt.row(0).toArray()).toEqual(full.row(0).toArray());
    expect(prompt.row(1).toArray()).toEqual(full.row(0).toArray());
    expect(full.row(1).shape[0]).toBeGreaterThan(full.row(0).shape[0]!);
    // The policy decodes the prompt tokens it got: the ChatML rendering of the query.
    expect(flat.getStrings(["text", "prompt"])[0]).toBe("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  });

  it("DatasetChatEnv: rewards on real generations, PolicyVersion, and a reset of done rows with new dataset rows", async () => {
    const version = new PolicyVersion();
    const env = new DatasetChatEnv(
      {
        dataset: { files: jsonl, fields: { query: "question", answer: "answer", id: "id" }, shuffle: false, repeats: 2 },
        batchSize: [4],
        rewards: [
          { name: "length", fn: (s) => s.response.length },
          { name: "mentions", fn: async (s) => Promise.resolve(s.response.includes(String(s.fields.answer)) ? 1 : 0) },
        ],
        rewardOptions: { done: true },
      },
      [version],
    );
    const wrapper = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 6, seed: 4 } });
    let td = await env.reset();
    expect(td.getStrings("id")).toEqual(["q0", "q0", "q1", "q1"]);
    expect(td.getTensor("policy_version", "int64").toArray()).toEqual([0n, 0n, 0n, 0n]);
    const acted = await wrapper.forward(td);
    const [stepped, next] = await env.stepAndMaybeReset(acted);
    const responses = acted.getHistory(["history", "response"]).rows.map((h) => h.last!.content);
    expect(stepped.getTensor(["next", "reward_components", "length"]).toNumbers()).toEqual(responses.map((r) => r.length));
    const expected = responses.map((r, i) => r.length + (r.includes(["3", "3", "7", "7"][i]!) ? 1 : 0));
    expect(stepped.getTensor(["next", "reward"]).toNumbers()).toEqual(expected);
    expect(readFlags(stepped, ["next", "done"])).toEqual([true, true, true, true]);
    // Every row was done: the next state holds the next group of rows, a fresh prompt and done flags.
    expect(next.getStrings("id")).toEqual(["q2", "q2", "q3", "q3"]);
    expect(next.getHistory(["history", "prompt"]).row(0).toJSON()).toEqual([{ role: "user", content: "What is 5 + 6?" }]);
    expect(readFlags(next, "done")).toEqual([false, false, false, false]);
    version.incrementVersion();
    td = await env.step(await wrapper.forward(next));
    expect(td.getTensor(["next", "policy_version"]).toNumbers()).toEqual([1, 1, 1, 1]);
    expect(version.versionHistory.map((v) => v.newVersion)).toEqual([0, 1]);
    expect(env.position).toEqual({ epoch: 0, index: 8 });
  });

  it("AddThinkingPrompt edits the last answer where the condition holds, undoing done and zeroing the reward", async () => {
    const env = new DatasetChatEnv(
      {
        dataset: { files: jsonl, fields: { query: "question", answer: "answer" }, shuffle: false },
        batchSize: [2],
        rewards: [{ name: "one", fn: (s) => (s.index === 0 ? 1 : 0) }],
        rewardOptions: { done: true },
      },
      [new AddThinkingPrompt({ cond: (next) => (next.getTensor("reward").item() as number) < 0.5, prompt: "Wait, let me recheck." })],
    );
    const wrapper = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 3, seed: 9 } });
    const acted = await wrapper.forward(await env.reset());
    const out = await env.step(acted);
    const next = out.getHistory(["next", "history", "prompt"]);
    const original = acted.getHistory(["history", "full"]);
    expect(next.row(0).equals(original.row(0))).toBe(true);
    const edited = next.row(1).last!;
    expect(edited).toEqual({ role: "assistant", content: replaceLastAnswer(original.row(1).last!.content, "Wait, let me recheck."), isComplete: false });
    expect(edited.content.endsWith("Wait, let me recheck.")).toBe(true);
    expect(readFlags(out, ["next", "done"])).toEqual([true, false]);
    expect(out.getTensor(["next", "reward"]).toNumbers()).toEqual([1, 0]);
    // The edited conversation goes back to the policy, which continues the open message.
    const again = await wrapper.forward(env.stepMdp(out));
    expect(again.getHistory(["history", "full"]).row(1).length).toBe(next.row(1).length + 1);
  });

  it("AddThinkingPrompt as a user message, and its checks", async () => {
    const t = new AddThinkingPrompt({ cond: () => true, role: "user", editLastTurn: false });
    const env = new TransformedEnv(new ChatEnv({ batchSize: [1] }), t);
    const td = await env.reset(new TensorDict({ query: ["q"] }, { batchSize: [1] }));
    td.set(["history", "full"], td.getHistory(["history", "prompt"]).appendEach([{ role: "assistant", content: "<answer>1</answer>" }]));
    const out = await env.step(td);
    expect(out.getHistory(["next", "history", "prompt"]).row(0).last).toEqual({ role: "user", content: "Please go over this again more carefully." });
    expect(() => new AddThinkingPrompt({ cond: () => true, role: "user" })).toThrow(/options\.editLastTurn/);
    expect(replaceLastAnswer("a <answer>1</answer> b <answer>2</answer>", "P")).toBe("a <answer>1</answer> b\n\nP");
    expect(replaceLastAnswer("no tags", "P")).toBe("no tags\n\nP");
    const textEnv = new TransformedEnv(new ChatEnv({ batchSize: [1], inputMode: "text" }), new AddThinkingPrompt({ cond: () => true }));
    const textTd = await textEnv.reset(new TensorDict({ query: ["q"] }, { batchSize: [1] }));
    textTd.set(["text", "full"], ["x"]);
    await expect(textEnv.step(textTd)).rejects.toThrow(/history mode/);
  });

  it("rejects bad options and out-of-order calls, naming what is wrong", async () => {
    expect(() => new ChatEnv({ inputMode: "tokens" })).toThrow(/ChatEnv options\.tokenizer: required in tokens mode/);
    expect(() => new ChatEnv({ batchSize: [] })).toThrow(/ChatEnv options\.batchSize/);
    expect(() => new ChatEnv({ chatTemplate: "no-such-template" })).toThrow(/ChatEnv options\.chatTemplate/);
    expect(() => new ChatEnv({ tokenizer: { worker: JSON.parse("{}") as WorkerClient, model: "policy" } })).toThrow(/options\.tokenizer\.worker/);
    const env = new ChatEnv({ batchSize: [2] });
    await expect(env.reset()).rejects.toThrow(EnvStateError);
    await expect(env.reset()).rejects.toThrow(/no "query" entry/);
    const td = await env.reset(queries());
    await expect(env.step(td)).rejects.toThrow(/history mode\): the TensorDict has no \["history","full"\]/);
    await expect(env.reset(new TensorDict({ query: Tensor.zeros("float32", [2]) }, { batchSize: [2] }))).rejects.toThrow(/must hold strings or a HistoryBatch/);
    expect(() => new PolicyVersion({ versionType: "semver" as "int" })).toThrow(InvalidArgumentError);
    const uuid = new PolicyVersion({ versionType: "uuid" });
    const first = uuid.version;
    expect(uuid.incrementVersion()).not.toBe(first);
    const tagged = await new TransformedEnv(new ChatEnv({ batchSize: [2] }), uuid).reset(queries());
    expect(tagged.getStrings("policy_version")).toEqual([uuid.version, uuid.version]);
    // A History query keeps its roles; the system prompt goes first.
    const sys = new ChatEnv({ batchSize: [1], systemPrompt: "S", systemRole: "developer" });
    const chat = HistoryBatch.from([[{ role: "user", content: "u" }, { role: "assistant", content: "a" }]]);
    const r = await sys.reset(new TensorDict({ query: chat }, { batchSize: [1] }));
    expect(r.getHistory(["history", "prompt"]).row(0).toJSON()).toEqual([
      { role: "developer", content: "S" },
      { role: "user", content: "u" },
      { role: "assistant", content: "a" },
    ]);
  });
});
