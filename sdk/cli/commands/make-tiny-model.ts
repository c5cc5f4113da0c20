/** `posttrain make-tiny-model DIR`: write the project's tiny random model (offline, deterministic). */
import { EXIT, UsageError, integerFlag, parseCommandArgs, say, stringFlag, type Command } from "../args.js";

const HELP = `Usage: posttrain make-tiny-model DIR [--seed N] [--hidden-size N] [--num-layers N] [--num-heads N]
                                 [--num-kv-heads N] [--intermediate-size N] [--max-position-embeddings N]
                                 [--vocab-size N]

Write a random tiny Qwen2-style model with a character-level tokenizer and a ChatML chat template into DIR
(offline, deterministic given --seed), for tests, examples and the demo.

Options:
  --seed N                     Seed of the random weights (default 0).
  --hidden-size N              Hidden size.
  --num-layers N               Number of decoder layers.
  --num-heads N                Attention heads.
  --num-kv-heads N             Key/value heads.
  --intermediate-size N        MLP size.
  --max-position-embeddings N  Longest sequence.
  --vocab-size N               Tokens in the vocabulary, padded with filler tokens (default: the 259
                               character tokens; e.g. 32000 for a real vocabulary's embedding size).
  -h, --help                   Show this help.
`;

const FLAGS = {
  seed: "seed",
  "hidden-size": "hiddenSize",
  "num-layers": "numLayers",
  "num-heads": "numHeads",
  "num-kv-heads": "numKvHeads",
  "intermediate-size": "intermediateSize",
  "max-position-embeddings": "maxPositionEmbeddings",
  "vocab-size": "vocabSize",
} as const;

/** The `make-tiny-model` command. */
export const makeTinyModelCommand: Command = {
  name: "make-tiny-model",
  summary: "Write a random tiny model with a character tokenizer into DIR (offline, for tests and demos).",
  help: HELP,
  async run(args) {
    const flags = Object.fromEntries(Object.keys(FLAGS).map((flag) => [flag, { type: "string" as const }]));
    const { values, positionals, help } = parseCommandArgs("make-tiny-model", args, flags, true);
    if (help) {
      process.stdout.write(HELP);
      return EXIT.ok;
    }
    const [dir, ...extra] = positionals;
    if (dir === undefined || extra.length > 0) {
      throw new UsageError(`expected one directory, got ${String(positionals.length)}`, "make-tiny-model");
    }
    const options: Record<string, number> = {};
    for (const [flag, key] of Object.entries(FLAGS)) {
      const raw = stringFlag(values, flag);
      if (raw !== undefined) options[key] = integerFlag("make-tiny-model", flag, raw, flag === "seed" ? 0 : 1);
    }
    const { makeTinyModel } = await import("../../models/index.js");
    const model = await makeTinyModel(dir, options);
    say(`${model.path}: ${model.parameters} parameters, vocabulary ${model.vocabSize}, ${model.bytes} bytes (${model.seconds.toFixed(1)} s)`);
    return EXIT.ok;
  },
};
