/**
 * Model presets of the benchmarks (`--model tiny|small|medium`, issue 18): random Qwen2-style models built
 * offline by {@link makeTinyModel}, from the project's tiny model up to sizes where compute, not the bridge,
 * dominates. `small` and `medium` have a real vocabulary's size (32000, Llama 2's), so the embedding, the LM head
 * and the sampling over the logits cost what they do in a real checkpoint; their tokenizer is still the tiny
 * character tokenizer (every ASCII character one token, the same ids as `tiny`), padded with filler tokens
 * that text never encodes to. Weights are random (seeded): the figures measure speed, never quality.
 */
import { InvalidArgumentError, makeTinyModel, type TinyModel, type TinyModelConfig } from "../sdk/index.js";

/** The preset names, smallest first. */
export const MODEL_PRESET_NAMES = ["tiny", "small", "medium"] as const;

/** A preset name: `tiny` (the project's tiny model), `small` (hidden 512, 8 layers) or `medium` (hidden 1024, 12 layers). */
export type ModelPresetName = (typeof MODEL_PRESET_NAMES)[number];

/** A preset's sizes: the fields of {@link TinyModelConfig} except the seed. */
export interface ModelPreset {
  /** Model width. */
  readonly hiddenSize: number;
  /** Decoder layers. */
  readonly numLayers: number;
  /** Attention heads. */
  readonly numHeads: number;
  /** Key/value heads (grouped-query attention). */
  readonly numKvHeads: number;
  /** MLP width. */
  readonly intermediateSize: number;
  /** Longest sequence, prompt and completion together. */
  readonly maxPositionEmbeddings: number;
  /** Tokens in the vocabulary; absent: the character tokenizer's own 259. */
  readonly vocabSize?: number;
}

/**
 * The presets. `tiny` is the builder's default (about 91k parameters, 259 tokens); `small` is about 40M
 * parameters and `medium` about 175M (float32: 0.16 GB and 0.7 GB on disk), both with 32000 tokens and grouped
 * query attention (half as many key/value heads), MLP widths about 2.75x the hidden size as in Llama/Qwen.
 */
export const MODEL_PRESETS: Readonly<Record<ModelPresetName, ModelPreset>> = {
  tiny: { hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, intermediateSize: 128, maxPositionEmbeddings: 512 },
  small: {
    hiddenSize: 512,
    numLayers: 8,
    numHeads: 8,
    numKvHeads: 4,
    intermediateSize: 1408,
    maxPositionEmbeddings: 1024,
    vocabSize: 32000,
  },
  medium: {
    hiddenSize: 1024,
    numLayers: 12,
    numHeads: 16,
    numKvHeads: 8,
    intermediateSize: 2816,
    maxPositionEmbeddings: 1024,
    vocabSize: 32000,
  },
};

/** A benchmark model on disk: what {@link makeTinyModel} reports, and the preset it was built from. */
export interface BenchModel extends TinyModel {
  /** The preset's name. */
  readonly preset: ModelPresetName;
}

/**
 * `value` (a `--model` flag's text; undefined: `fallback`) as a preset name, or an {@link InvalidArgumentError}
 * naming `flag` and the accepted names.
 */
export function parseModelPreset(value: string | undefined, fallback: ModelPresetName = "tiny", flag = "--model"): ModelPresetName {
  if (value === undefined) return fallback;
  if ((MODEL_PRESET_NAMES as readonly string[]).includes(value)) return value as ModelPresetName;
  throw new InvalidArgumentError(`${flag}: expected one of ${MODEL_PRESET_NAMES.join(", ")}, got ${JSON.stringify(value)}`);
}

/** Options of {@link buildBenchModel}. */
export interface BuildBenchModelOptions {
  /** Seed of the random weights (default 0). */
  readonly seed?: number;
  /** Python interpreter with `posttrain_worker` (default: as for workers). */
  readonly python?: string;
  /** Sizes that replace the preset's (for a benchmark that varies one, such as the vocabulary). */
  readonly override?: Partial<ModelPreset>;
}

/**
 * Builds `preset`'s model into `dir` (created if missing; the builder's files overwritten) and returns what was
 * written. Deterministic given the seed; `medium` takes about half a minute and 0.7 GB of disk on a 2-core VM.
 */
export async function buildBenchModel(preset: ModelPresetName, dir: string, options: BuildBenchModelOptions = {}): Promise<BenchModel> {
  const sizes: TinyModelConfig = { ...MODEL_PRESETS[parseModelPreset(preset, "tiny", "preset")], ...options.override };
  const built = await makeTinyModel(dir, {
    ...sizes,
    seed: options.seed ?? 0,
    ...(options.python === undefined ? {} : { python: options.python }),
  });
  return { ...built, preset };
}
