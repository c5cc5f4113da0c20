// PythonInterpreter on a real ChatEnv, driven by a scripted policy (a TS object writing fixed assistant messages):
// results as tool messages in TorchRL's words, failures (exception, timeout, crash) as error messages while the
// env goes on, persistent state per row across turns, and bad inputs.
import { afterEach, describe, expect, it } from "vitest";
import { EnvStateError, InvalidArgumentError, RequestAbortedError, TensorDict, TransformedEnv } from "../../sdk/index.js";
import { ChatEnv } from "../../sdk/envs/chat-env.js";
import { PythonInterpreter } from "../../sdk/envs/tools/index.js";
import { resetWith, ScriptedPolicy, toolReplies } from "./tools.helpers.js";

const py = (code: string): string => `\`\`\`python\n${code}\n\`\`\``;

let env: TransformedEnv | undefined;

afterEach(async () => {
  await env?.close();
  env = undefined;
});

async function stepOnce(e: TransformedEnv, policy: ScriptedPolicy, td: TensorDict): Promise<TensorDict> {
  const stepped = await e.step(policy.forward(td));
  return stepped.getTensorDict("next");
}

describe("PythonInterpreter", () => {
  it("answers each python block of a row with one tool message, and leaves rows without code alone", async () => {
    env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [new PythonInterpreter({ timeoutMs: 5_000 })]);
    const policy = new ScriptedPolicy((_turn, _prompt, row) =>
      row === 0 ? `Let me compute.\n${py("a = 6\nprint(a * 7)")}\nand\n${py("print(undefined_name)")}` : "No code here.",
    );
    const next = await stepOnce(env, policy, await resetWith(env, ["q0", "q1"]));
    const prompts = next.getHistory(["history", "prompt"]);
    const row0 = toolReplies(prompts.row(0));
    expect(row0).toHaveLength(2);
    expect(row0[0]).toEqual({ role: "tool", content: "Code block 1 executed successfully:\n42\n" });
    expect(row0[1]!.role).toBe("tool");
    expect(row0[1]!.content).toMatch(/^Code block 2 failed:\nTraceback \(most recent call last\):\n/);
    expect(row0[1]!.content).toMatch(/NameError: name 'undefined_name' is not defined\n$/);
    expect(toolReplies(prompts.row(1))).toEqual([]);
    expect(prompts.row(1).messages.map((m) => m.role)).toEqual(["user", "assistant"]);
  });

  it("turns a timeout and a crash into error messages, and the env goes on to the next turn", async () => {
    env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [new PythonInterpreter({ timeoutMs: 1_000 })]);
    const policy = new ScriptedPolicy((turn, _prompt, row) => {
      if (turn > 0) return py(`print("turn ${turn} row ${row}")`);
      return row === 0 ? py("print('spinning', flush=True)\nwhile True:\n    pass") : py("import os\nos._exit(4)");
    });
    const stepped = await env.step(policy.forward(await resetWith(env, ["q0", "q1"])));
    const first = stepped.getTensorDict("next");
    const [timeout] = toolReplies(first.getHistory(["history", "prompt"]).row(0));
    const [crash] = toolReplies(first.getHistory(["history", "prompt"]).row(1));
    expect(timeout?.content).toBe("Code block 1 failed:\nspinning\nExecution timed out after 1000 ms.");
    expect(crash?.content).toBe("Code block 1 failed:\nThe interpreter crashed (exited with code 4).");
    const second = await stepOnce(env, policy, env.stepMdp(stepped));
    const replies = second.getHistory(["history", "prompt"]).rows.map((h) => toolReplies(h)[0]?.content);
    expect(replies).toEqual(["Code block 1 executed successfully:\nturn 1 row 0\n", "Code block 1 executed successfully:\nturn 1 row 1\n"]);
  });

  it("persistent: keeps one interpreter per row across turns, and an env reset starts them afresh", async () => {
    env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [new PythonInterpreter({ persistent: true, timeoutMs: 5_000 })]);
    const policy = new ScriptedPolicy((turn, _prompt, row) => (turn === 0 ? py(`x = ${row === 0 ? 5 : 7}`) : py("print(x * 2)")));
    let td = await resetWith(env, ["q0", "q1"]);
    td = env.stepMdp(await env.step(policy.forward(td)));
    const second = await stepOnce(env, policy, td);
    const replies = second.getHistory(["history", "prompt"]).rows.map((h) => toolReplies(h)[0]?.content);
    expect(replies).toEqual(["Code block 1 executed successfully:\n10\n", "Code block 1 executed successfully:\n14\n"]);

    const askOnly = new ScriptedPolicy(() => py("print(x)"));
    const afterReset = await stepOnce(env, askOnly, await resetWith(env, ["q0", "q1"]));
    for (const h of afterReset.getHistory(["history", "prompt"]).rows) {
      expect(toolReplies(h)[0]?.content).toMatch(/^Code block 1 failed:\n[\s\S]*NameError: name 'x' is not defined\n$/);
    }
  });

  it("persistent: says the variables are gone after a crash, then runs in a fresh interpreter", async () => {
    const interpreter = new PythonInterpreter({ persistent: true, timeoutMs: 5_000 });
    env = new TransformedEnv(new ChatEnv({ batchSize: [1] }), [interpreter]);
    const crashed = await interpreter.toolMessages(py("y = 1\nimport os\nos._exit(1)"));
    expect(crashed).toEqual([
      { role: "tool", content: "Code block 1 failed:\nThe interpreter crashed (exited with code 1); the interpreter was restarted and earlier variables are gone." },
    ]);
    const after = await interpreter.toolMessages(py("print('y' in globals())"));
    expect(after[0]?.content).toBe("Code block 1 executed successfully:\nFalse\n");
  });

  it("uses the configured tool role and passes the env call's AbortSignal to the sandbox", async () => {
    const interpreter = new PythonInterpreter({ toolRole: "ipython" });
    env = new TransformedEnv(new ChatEnv({ batchSize: [1] }), [interpreter]);
    expect((await interpreter.toolMessages(py("print(1)")))[0]?.role).toBe("ipython");
    const policy = new ScriptedPolicy(() => py("import time\ntime.sleep(30)"));
    const td = policy.forward(await resetWith(env, ["q"]));
    const controller = new AbortController();
    setTimeout(() => {
      controller.abort();
    }, 300);
    await expect(env.step(td, { signal: controller.signal })).rejects.toBeInstanceOf(RequestAbortedError);
  });

  it("refuses a ChatEnv that is not in history mode with EnvStateError", async () => {
    env = new TransformedEnv(new ChatEnv({ batchSize: [1], inputMode: "text" }), [new PythonInterpreter()]);
    const td = await env.reset(new TensorDict({ query: ["q"] }, { batchSize: [1] }));
    td.set(["text", "response"], ["```python\nprint(1)\n```"]);
    await expect(env.step(td)).rejects.toThrow(EnvStateError);
    await expect(env.step(td)).rejects.toThrow(/PythonInterpreter: needs a ChatEnv in history mode/);
  });

  it.each([
    [{ timeoutMs: 0 }, /PythonInterpreter options\.timeoutMs:/],
    [{ maxConcurrency: 0 }, /PythonInterpreter options\.maxConcurrency:/],
    [{ toolRole: "" }, /PythonInterpreter options\.toolRole:/],
    [{ persistant: true }, /PythonInterpreter options\.persistant: unknown field/],
  ])("rejects options %j with InvalidArgumentError naming the field", (options, pattern) => {
    const make = (): PythonInterpreter => new PythonInterpreter(options as never);
    expect(make).toThrow(InvalidArgumentError);
    expect(make).toThrow(pattern);
  });
});
