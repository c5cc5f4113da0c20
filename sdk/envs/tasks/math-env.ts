/**
 * `MATHEnv`: competition mathematics (TorchRL's `MATHEnv`), a `DatasetChatEnv` over a MATH-format file
 * (`problem`, `solution` with a final `\boxed{…}`) with the MATH reward (1.0 equivalent / 0.1 well-formed / 0).
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import { DatasetChatEnv } from "../dataset-chat-env.js";
import { mathScore } from "./math.js";
import { openMathVerifier, type OpenMathVerifier } from "./math-verify.js";
import { TaskRewardTransform, TIERED_EXTRA_KEYS, tieredResult } from "./task-reward.js";
import { stepCounterFor, taskEnvOptionsSchema, TieredLevelsSchema } from "./task-env-options.js";

/** The default system prompt of {@link MATHEnv}. */
export const MATH_SYSTEM_PROMPT =
  "You solve mathematics problems for the user. First reason step by step inside <think></think> tags, then give " +
  "only the final answer inside <answer></answer> tags, written in LaTeX where needed, for example: " +
  "<think>The roots are 2 and 7.</think> <answer>\\frac{9}{2}</answer>";

/** Options of {@link MATHEnv}. */
export const MATHEnvOptionsSchema = taskEnvOptionsSchema(MATH_SYSTEM_PROMPT, { query: "problem", answer: "solution" }, {
  ...TieredLevelsSchema.shape,
  /**
   * How answers are compared: `"auto"` (default) uses `math-verify` through pythonia when the interpreter has it,
   * else normalised string equality; `"math-verify"` requires it; `"string"` never starts Python.
   */
  equivalence: z.enum(["auto", "math-verify", "string"]).default("auto"),
  /** The Python interpreter for math-verify (default: the workers' interpreter). */
  python: z.string().min(1).optional(),
});

/** Options of {@link MATHEnv}: `DatasetChatEnv`'s (`dataset.files` required) and the task's. */
export type MATHEnvOptions = z.input<typeof MATHEnvOptionsSchema>;

/**
 * MATH as a chat environment: like `GSM8KEnv`, with the reference answer taken from the last `\boxed{…}` of the
 * row's `answer` field (the dataset's `solution` column) and answers compared by {@link mathScore}. The verifier
 * is opened at the first step and released by `close()` (which also stops the shared pythonia process once no
 * verifier uses it); {@link MATHEnv.verifier} tells which backend is in use and, on fallback, why.
 */
export class MATHEnv extends DatasetChatEnv {
  #verifier: Promise<OpenMathVerifier> | undefined;

  constructor(options: MATHEnvOptions) {
    const o = parseOptions(MATHEnvOptionsSchema, options, "MATHEnv options");
    const { maxSteps, setDoneIfAnswer, eosTokens, correctReward, formatReward, equivalence, python, ...chat } = o;
    const state: { env?: MATHEnv } = {};
    const reward = new TaskRewardTransform({
      name: "math",
      fieldKeys: ["answer"],
      extraKeys: TIERED_EXTRA_KEYS,
      setDoneIfAnswer,
      score: async ({ response, fields }) => {
        const verifier = await state.env!.verifier();
        return tieredResult(await mathScore(response, fields.answer!, { verifier, correctReward, formatReward, ...(eosTokens ? { eosTokens } : {}) }));
      },
      close: async () => {
        const opened = state.env!.#verifier;
        state.env!.#verifier = undefined;
        if (opened !== undefined) await (await opened).close();
      },
    });
    super(chat, [...stepCounterFor(maxSteps), reward]);
    state.env = this;
    this.#equivalence = { backend: equivalence, ...(python !== undefined ? { python } : {}) };
  }

  readonly #equivalence: { readonly backend: "auto" | "math-verify" | "string"; readonly python?: string };

  /**
   * The answer verifier, opened on first use (at the first step, or now): `backend` says whether math-verify or
   * string equality decides, `fallbackReason` why math-verify is not used under `"auto"`. Throws
   * `MathVerifyUnavailableError` under `equivalence: "math-verify"` when it cannot be loaded.
   */
  verifier(): Promise<OpenMathVerifier> {
    this.#verifier ??= openMathVerifier(this.#equivalence);
    const opened = this.#verifier;
    opened.catch(() => {
      if (this.#verifier === opened) this.#verifier = undefined;
    });
    return opened;
  }
}
