/** `posttrain make-tiny-model DIR`: write the project's tiny random model (offline, deterministic). */
import { EXIT, UsageError, integerFlag, parseCommandArgs, say, stringFlag, type Command } from "../args.js";

const HELP = `Usage: posttrain make-tiny-model DIR [--family NAME] [--chat-template FILE] [--seed N] [--hidden-size N]
                                 [--num-layers N] [--num-heads N] [--num-kv-heads N] [--head-dim N]
                                 [--intermediate-size N] [--max-position-embeddings N] [--vocab-size N]

Write a random tiny model with a character-level tokenizer into DIR (offline, deterministic given --seed), for
tests, examples and the demo: by default Qwen2-style with a ChatML chat template.

Options:
  --family NAME                Architecture, special tokens and stop tokens: qwen2 (default), qwen3, llama3,
                               mistral, gemma2 or phi3 (docs/models.md, "Model families").
  --chat-template FILE         A Jinja chat template to store with the model (default: the tiny ChatML one for
                               qwen2, none for the other families).
  --seed N                     Seed of the random weights (default 0).
  --hidden-size N              Hidden size.
  --num-layers N               Number of decoder layers.
  --num-heads N                Attention heads.
  --num-kv-heads N             Key/value heads.
  --head-dim N                 Head size (vLLM's CPU attention takes 32, 64, 80, 96, 112, 128, ...; not 16).
  --intermediate-size N        MLP size.
  --max-position-embeddings N  Longest sequence.
  --vocab-size N               Tokens in the vocabulary, padded with filler tokens (default: the 259
                               character tokens; e.g. 32000 for a real vocabulary's embedding size).
  -h, --help                   Show this help.
`;

/** Integer flags and their option names. */
const FLAGS = {
  seed: "seed",
  "hidden-size": "hiddenSize",
  "num-layers": "numLayers",
  "num-heads": "numHeads",
  "num-kv-heads": "numKvHeads",
  "head-dim": "headDim",
  "intermediate-size": "intermediateSize",
  "max-position-embeddings": "maxPositionEmbeddings",
  "vocab-size": "vocabSize",
} as const;

/** String flags and their option names. */
const STRING_FLAGS = { family: "family", "chat-template": "chatTemplateFile" } as const;

/** The `make-tiny-model` command. */
export const makeTinyModelCommand: Command = {
  name: "make-tiny-model",
  summary: "Write a random tiny model with a character tokenizer into DIR (offline, for tests and demos).",
  help: HELP,
  async run(args) {
    const names = [...Object.keys(FLAGS), ...Object.keys(STRING_FLAGS)];
    const flags = Object.fromEntries(names.map((flag) => [flag, { type: "string" as const }]));
    const { values, positionals, help } = parseCommandArgs("make-tiny-model", args, flags, true);
    if (help) {
      process.stdout.write(HELP);
      return EXIT.ok;
    }
    const [dir, ...extra] = positionals;
    if (dir === undefined || extra.length > 0) {
      throw new UsageError(`expected one directory, got ${String(positionals.length)}`, "make-tiny-model");
    }
    const options: Record<string, number | string> = {};
    for (const [flag, key] of Object.entries(FLAGS)) {
      const raw = stringFlag(values, flag);
      if (raw !== undefined) options[key] = integerFlag("make-tiny-model", flag, raw, flag === "seed" ? 0 : 1);
    }
    for (const [flag, key] of Object.entries(STRING_FLAGS)) {
      const raw = stringFlag(values, flag);
      if (raw !== undefined) options[key] = raw;
    }
    const { makeTinyModel } = await import("../../models/index.js");
    // the schema checks the family's name and the values, naming the option
    const model = await makeTinyModel(dir, options);
    say(`${model.path}: ${model.parameters} parameters, vocabulary ${model.vocabSize}, ${model.bytes} bytes (${model.seconds.toFixed(1)} s)`);
    return EXIT.ok;
  },
};
