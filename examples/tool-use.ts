// A multi-turn tool-use episode: `npx tsx examples/tool-use.ts`.
//
// ChatEnv + two tool transforms (PythonInterpreter runs ```python blocks in a sandboxed child interpreter;
// SimpleToolTransform runs a TypeScript function for `<tool>add ...</tool>` calls) + ToolEpisodeEnd (the episode
// ends on an answer, or after maxTurns). The policy is the tiny model in a local CPU worker. A random tiny model
// never writes a tool call, so the first turn is scripted (`scriptedFirstTurn` below: one python block and one
// `add` call, so both tools really run); every later turn is the model's, generated from a prompt that holds
// the tools' answers. The script prints the whole conversation of each row.
// `--quick` (or POSTTRAIN_QUICK=1): fewer new tokens per turn, for CI.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import {
  ChatEnv,
  HistoryBatch,
  makeTinyModel,
  PythonInterpreter,
  readFlags,
  SimpleToolTransform,
  TensorDict,
  ToolEpisodeEnd,
  TransformedEnv,
  TransformersWrapper,
  WorkerPool,
} from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

const questions = ["What is the sum of 0..9, plus 5?", "What is the sum of 0..19, plus 7?"];

/**
 * The scripted first turn, standing in for a trained model: row r runs python for the sum, then asks the `add`
 * tool to add the constant of its question. The tool answers come back as `tool` messages in the next prompt.
 */
function scriptedFirstTurn(td: TensorDict): TensorDict {
  const prompts = td.getHistory(["history", "prompt"]);
  const responses = HistoryBatch.from(
    prompts.rows.map((_, row) => {
      const n = 10 * (row + 1);
      const add = JSON.stringify({ a: (n * (n - 1)) / 2, b: row === 0 ? 5 : 7 });
      const content = `Let me compute.\n\`\`\`python\nprint(sum(range(${n})))\n\`\`\`\n<tool>add\n${add}</tool>`;
      return [{ role: "assistant", content }];
    }),
  );
  const out = td.exclude();
  out.set(["history", "response"], responses);
  out.set(["history", "full"], prompts.appendEach(responses.rows));
  return out;
}

const dir = await mkdtemp(join(tmpdir(), "posttrain-tool-use-"));
const [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed: 7 }), WorkerPool.local({ device: "cpu" })]);
try {
  const worker = pool.worker(0);
  await worker.loadModel({ name: "policy", path: tiny.path });
  say(`tool-use episode: tiny model (${tiny.parameters} parameters) in ${worker.name}, python sandbox + an "add" tool`);
  const model = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: quick ? 8 : 24, seed: 1 } });
  const adder = new SimpleToolTransform({
    tools: {
      add: {
        description: "Adds two numbers.",
        schema: z.object({ a: z.number(), b: z.number() }),
        run: ({ a, b }) => a + b,
      },
    },
  });
  await using env = new TransformedEnv(new ChatEnv({ batchSize: [questions.length], systemPrompt: "Use python and the add tool." }), [
    new PythonInterpreter({ timeoutMs: 5_000 }),
    adder,
    new ToolEpisodeEnd({ maxTurns: 3 }),
  ]);

  // Stepped by hand (not env.rollout): the scripted turn and the model write different keys.
  let td = await env.reset(new TensorDict({ query: questions }, { batchSize: [questions.length] }));
  let turns = 0;
  let last = td;
  for (let turn = 0; turn < 3; turn++) {
    const action = turn === 0 ? scriptedFirstTurn(td) : await model.forward(td);
    const stepped = await env.step(action);
    turns++;
    last = stepped.getTensorDict("next");
    if (readFlags(last, "done").every((d) => d)) break;
    td = env.stepMdp(stepped);
  }

  const conversations = last.getHistory(["history", "prompt"]).rows;
  const [done, terminated, truncated] = ["done", "terminated", "truncated"].map((k) => readFlags(last, k));
  conversations.forEach((history, row) => {
    say(`episode ${row}: ${turns} turns, done=${String(done![row])} terminated=${String(terminated![row])} truncated=${String(truncated![row])}`);
    for (const message of history.messages) {
      say(`  ${message.role.padEnd(9)} ${JSON.stringify(message.content)}`);
    }
  });
  const toolMessages = conversations.flatMap((h) => h.messages.filter((m) => m.role === "tool"));
  say(`tool messages: ${toolMessages.length} (${toolMessages.filter((m) => m.content.includes("successfully")).length} succeeded)`);
} finally {
  await pool.close();
  await rm(dir, { recursive: true, force: true });
}
