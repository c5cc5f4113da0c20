// Loss configs (sdk/objectives): TorchRL's defaults, every bad field rejected with InvalidArgumentError naming
// it, the wire JSON of each class, and the worker's own parser (posttrain_worker.objectives) reading every wire
// config back to the same values and rejecting the same mistakes.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { resolvePython } from "../../bridge/index.js";
import {
  CISPOLoss,
  DAPOLoss,
  GRPOLoss,
  GSPOLoss,
  createLoss,
  InvalidArgumentError,
  OFF_POLICY_CORRECTIONS,
  SAPOLoss,
  SFTLoss,
  type LossConfigLike,
  type LossWire,
} from "../../sdk/index.js";

function rejects(make: () => unknown, field: string, where: string): void {
  let caught: unknown;
  try {
    make();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(InvalidArgumentError);
  const error = caught as InvalidArgumentError;
  expect(error.code).toBe("INVALID_ARGUMENT");
  expect(error.message).toContain(`${where}.${field}:`);
}

/** Runs the worker's parser on each wire config; returns its parsed fields, or its error, per config. */
function parseInWorker(wires: readonly unknown[]): ({ ok: true; config: Record<string, unknown> } | { ok: false; code: string; message: string })[] {
  const script = [
    "import json, sys",
    "from posttrain_worker.objectives import describe, parse_loss_config",
    "from posttrain_worker.protocol.errors import WorkerFailure",
    "out = []",
    "for raw in json.load(sys.stdin):",
    "    try:",
    "        out.append({'ok': True, 'config': describe(parse_loss_config(raw))})",
    "    except WorkerFailure as err:",
    "        out.append({'ok': False, 'code': err.code, 'message': err.message})",
    "print(json.dumps(out))",
  ].join("\n");
  const result = spawnSync(resolvePython(), ["-c", script], { input: JSON.stringify(wires), encoding: "utf8" });
  expect(result.status, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as ReturnType<typeof parseInWorker>;
}

describe("defaults", () => {
  it("GRPOLoss has TorchRL's defaults", () => {
    const loss = new GRPOLoss();
    expect(loss.config).toMatchObject({
      clipEpsilon: 0.2,
      dualClip: null,
      klToRefCoeff: null,
      klToInferenceCoeff: null,
      klBiasCorrection: false,
      entropyBonus: true,
      entropyCoeff: 0.01,
      maskingStrategy: "sft",
    });
    expect(loss.toWire()).toEqual({
      type: "grpo",
      clipEpsilon: [0.2, 0.2],
      dualClip: null,
      klToRefCoeff: null,
      klToInferenceCoeff: null,
      klBiasCorrection: false,
      entropyBonus: true,
      entropyCoeff: 0.01,
      maskingStrategy: "sft",
      aggregation: "token_mean",
    });
  });

  it("DAPOLoss is GRPO with clip-higher and a dual clip, and keeps the caller's overrides", () => {
    expect(new DAPOLoss().toWire()).toMatchObject({ type: "grpo", clipEpsilon: [0.2, 0.28], dualClip: 3 });
    expect(new DAPOLoss({ dualClip: null, clipEpsilon: 0.25 }).toWire()).toMatchObject({ clipEpsilon: [0.25, 0.25], dualClip: null });
    expect(new DAPOLoss()).toBeInstanceOf(GRPOLoss);
  });

  it("each variant has its own defaults", () => {
    expect(new CISPOLoss().toWire()).toMatchObject({ type: "cispo", clipEpsilon: [1, 4], aggregation: "token_mean" });
    expect(new GSPOLoss().toWire()).toMatchObject({ type: "gspo", clipEpsilon: [3e-4, 4e-4], aggregation: "prompt_mean" });
    expect(new SAPOLoss().toWire()).toMatchObject({ type: "sapo", temperaturePos: 1, temperatureNeg: 1.05 });
    expect(new SFTLoss().toWire()).toEqual({ type: "sft", lossFunction: "sft", normalizeBySeqLength: true, klToRefCoeff: null, beta: 0.1 });
  });
});

describe("wire", () => {
  it("sends lossType instead of aggregation, with maxCompletionLength for dr_grpo", () => {
    const wire = new GRPOLoss({ lossType: "dr_grpo", maxCompletionLength: 256, klToRefCoeff: 0.04, klBiasCorrection: true }).toWire();
    expect(wire).toMatchObject({ lossType: "dr_grpo", maxCompletionLength: 256, klToRefCoeff: 0.04, klBiasCorrection: true });
    expect("aggregation" in wire).toBe(false);
    const dapo = new SAPOLoss({ lossType: "dapo" }).toWire();
    expect(dapo.lossType).toBe("dapo");
    expect("maxCompletionLength" in dapo).toBe(false);
    expect(new GRPOLoss({ aggregation: "none" }).toWire().aggregation).toBe("none");
  });

  it("is plain JSON (round-trips through JSON.stringify)", () => {
    const losses: LossConfigLike[] = [new GRPOLoss({ clipEpsilon: [0.1, 0.3] }), new CISPOLoss(), new GSPOLoss(), new SAPOLoss(), new SFTLoss()];
    for (const loss of losses) {
      const wire: LossWire = loss.toWire();
      expect(JSON.parse(JSON.stringify(wire))).toEqual(wire);
    }
  });

  it("is read back by the worker's parser to the same values", () => {
    const losses: LossConfigLike[] = [
      new GRPOLoss(),
      new GRPOLoss({ clipEpsilon: [0.1, 0.3], dualClip: 2, klToRefCoeff: 0.2, klToInferenceCoeff: 0.1, entropyBonus: false, aggregation: "prompt_mean", maskingStrategy: "rlhf" }),
      new GRPOLoss({ lossType: "dr_grpo", maxCompletionLength: 64, klBiasCorrection: true }),
      new DAPOLoss({ lossType: "dapo" }),
      new CISPOLoss({ clipEpsilon: [1, 4], entropyCoeff: 0.02 }),
      new GSPOLoss({ lossType: "grpo" }),
      new SAPOLoss({ temperaturePos: 0.9, temperatureNeg: 1.2, aggregation: "none" }),
      new SFTLoss({ lossFunction: "minor_sft", beta: 0.5, normalizeBySeqLength: false }),
      new SFTLoss({ klToRefCoeff: 0.3 }),
    ];
    const wires = losses.map((l) => l.toWire());
    const parsed = parseInWorker(wires);
    expect(parsed).toHaveLength(wires.length);
    parsed.forEach((result, i) => {
      const wire = wires[i]!;
      if (!result.ok) throw new Error(`${JSON.stringify(wire)}: ${result.message}`);
      const config = result.config;
      if (wire.type === "sft") {
        expect(config).toMatchObject({ loss_function: wire.lossFunction, normalize_by_seq_length: wire.normalizeBySeqLength, kl_to_ref_coeff: wire.klToRefCoeff, beta: wire.beta });
        return;
      }
      expect(config).toMatchObject({
        type: wire.type,
        kl_to_ref_coeff: wire.klToRefCoeff,
        kl_to_inference_coeff: wire.klToInferenceCoeff,
        kl_bias_correction: wire.klBiasCorrection,
        entropy_bonus: wire.entropyBonus,
        entropy_coeff: wire.entropyCoeff,
        masking_strategy: wire.maskingStrategy,
        loss_type: wire.lossType ?? null,
        max_completion_length: wire.maxCompletionLength ?? null,
      });
      if (wire.aggregation !== undefined) expect(config.aggregation).toBe(wire.aggregation);
      if (wire.type === "sapo") {
        expect(config).toMatchObject({ temperature_pos: wire.temperaturePos, temperature_neg: wire.temperatureNeg });
      } else {
        expect([config.clip_epsilon_low, config.clip_epsilon_high]).toEqual(wire.clipEpsilon);
      }
      if (wire.type === "grpo") expect(config.dual_clip).toBe(wire.dualClip);
    });
  });

  it("the worker rejects, naming the field, what the TS schemas reject", () => {
    const bad = [
      [{ type: "grpo", clipEpsilon: [0.2, 0.28], dualClip: 1.1 }, "loss.dualClip"],
      [{ type: "grpo", lossType: "grpo", aggregation: "token_mean" }, "loss.aggregation"],
      [{ type: "grpo", lossType: "dr_grpo" }, "loss.maxCompletionLength"],
      [{ type: "sft", lossFunction: "minor_sft", klToRefCoeff: 0.1 }, "loss.klToRefCoeff"],
      [{ type: "sapo", clipEpsilon: 0.2 }, "loss.clipEpsilon"],
      [{ type: "dpo" }, "loss.type"],
    ] as const;
    const parsed = parseInWorker(bad.map(([wire]) => wire));
    parsed.forEach((result, i) => {
      expect(result.ok).toBe(false);
      if (!result.ok) {
        expect(result.code).toBe("BAD_ARGUMENTS");
        expect(result.message.startsWith(bad[i]![1])).toBe(true);
      }
    });
  });
});

describe("bad options name the field", () => {
  const cases: [string, () => unknown, string, string][] = [
    ["negative clip", () => new GRPOLoss({ clipEpsilon: -0.1 }), "clipEpsilon", "GRPOLoss options"],
    ["clip low >= 1", () => new GRPOLoss({ clipEpsilon: [1, 0.2] }), "clipEpsilon", "GRPOLoss options"],
    ["clip of three", () => new GRPOLoss({ clipEpsilon: [0.1, 0.2, 0.3] as unknown as [number, number] }), "clipEpsilon", "GRPOLoss options"],
    ["dual clip too small", () => new GRPOLoss({ clipEpsilon: [0.2, 0.28], dualClip: 1.2 }), "dualClip", "GRPOLoss options"],
    ["DAPO dual clip too small", () => new DAPOLoss({ dualClip: 1.1 }), "dualClip", "DAPOLoss options"],
    ["negative KL", () => new GRPOLoss({ klToRefCoeff: -1 }), "klToRefCoeff", "GRPOLoss options"],
    ["KL not a number", () => new GRPOLoss({ klToInferenceCoeff: "0.1" as unknown as number }), "klToInferenceCoeff", "GRPOLoss options"],
    ["entropy bonus not a boolean", () => new GRPOLoss({ entropyBonus: 1 as unknown as boolean }), "entropyBonus", "GRPOLoss options"],
    ["negative entropy coeff", () => new SAPOLoss({ entropyCoeff: -0.1 }), "entropyCoeff", "SAPOLoss options"],
    ["unknown aggregation", () => new GRPOLoss({ aggregation: "mean" as "token_mean" }), "aggregation", "GRPOLoss options"],
    ["unknown lossType", () => new GRPOLoss({ lossType: "ppo" as "grpo" }), "lossType", "GRPOLoss options"],
    ["aggregation with lossType", () => new GRPOLoss({ lossType: "grpo", aggregation: "token_mean" }), "aggregation", "GRPOLoss options"],
    ["dr_grpo without its constant", () => new GSPOLoss({ lossType: "dr_grpo" }), "maxCompletionLength", "GSPOLoss options"],
    ["constant without dr_grpo", () => new GRPOLoss({ maxCompletionLength: 128 }), "maxCompletionLength", "GRPOLoss options"],
    ["fractional constant", () => new GRPOLoss({ lossType: "dr_grpo", maxCompletionLength: 1.5 }), "maxCompletionLength", "GRPOLoss options"],
    ["unknown masking", () => new GRPOLoss({ maskingStrategy: "all" as "sft" }), "maskingStrategy", "GRPOLoss options"],
    ["unknown field", () => new GRPOLoss({ clip_epsilon: 0.2 } as unknown as Record<string, never>), "", "GRPOLoss options"],
    ["CISPO clip low > 1", () => new CISPOLoss({ clipEpsilon: [1.5, 4] }), "clipEpsilon", "CISPOLoss options"],
    ["CISPO has no dual clip", () => new CISPOLoss({ dualClip: 3 } as unknown as Record<string, never>), "", "CISPOLoss options"],
    ["SAPO zero temperature", () => new SAPOLoss({ temperaturePos: 0 }), "temperaturePos", "SAPOLoss options"],
    ["SAPO has no clip", () => new SAPOLoss({ clipEpsilon: 0.2 } as unknown as Record<string, never>), "", "SAPOLoss options"],
    ["GSPO clip low >= 1", () => new GSPOLoss({ clipEpsilon: 1 }), "clipEpsilon", "GSPOLoss options"],
    ["SFT unknown function", () => new SFTLoss({ lossFunction: "dpo" as "sft" }), "lossFunction", "SFTLoss options"],
    ["SFT zero beta", () => new SFTLoss({ beta: 0 }), "beta", "SFTLoss options"],
    ["minor_sft with a KL", () => new SFTLoss({ lossFunction: "minor_sft", klToRefCoeff: 0.1 }), "klToRefCoeff", "SFTLoss options"],
    ["SFT normalize not a boolean", () => new SFTLoss({ normalizeBySeqLength: "yes" as unknown as boolean }), "normalizeBySeqLength", "SFTLoss options"],
  ];
  for (const [name, make, field, where] of cases) {
    it(name, () => {
      if (field === "") {
        expect(make).toThrow(InvalidArgumentError);
        expect(make).toThrow(/unknown field/);
      } else {
        rejects(make, field, where);
      }
    });
  }

  it("accepts the edges", () => {
    expect(new GRPOLoss({ clipEpsilon: 0 }).toWire().clipEpsilon).toEqual([0, 0]);
    expect(new CISPOLoss({ clipEpsilon: [1, 0] }).toWire().clipEpsilon).toEqual([1, 0]);
    expect(new SFTLoss({ lossFunction: "minor_sft", klToRefCoeff: 0 }).toWire().klToRefCoeff).toBe(0);
    expect(new GRPOLoss({ klToRefCoeff: 0 }).toWire().klToRefCoeff).toBe(0);
  });
});

describe("off-policy correction (GRPOLoss, DAPOLoss)", () => {
  it("is off by default, and then nothing of it travels", () => {
    expect(new GRPOLoss().config.offPolicyCorrection).toBe("none");
    expect(OFF_POLICY_CORRECTIONS).toEqual(["none", "tis", "decoupled"]);
    for (const wire of [new GRPOLoss().toWire(), new DAPOLoss().toWire(), new GRPOLoss({ offPolicyCorrection: "none" }).toWire()]) {
      expect("offPolicyCorrection" in wire).toBe(false);
      expect("isCap" in wire).toBe(false);
    }
  });

  it("sends the mode and the cap in effect", () => {
    expect(new GRPOLoss({ offPolicyCorrection: "tis" }).toWire()).toMatchObject({ offPolicyCorrection: "tis", isCap: 2 });
    expect(new GRPOLoss({ offPolicyCorrection: "tis", isCap: 1 }).toWire()).toMatchObject({ offPolicyCorrection: "tis", isCap: 1 });
    expect(new GRPOLoss({ offPolicyCorrection: "decoupled" }).toWire()).toMatchObject({ offPolicyCorrection: "decoupled", isCap: null });
    expect(new GRPOLoss({ offPolicyCorrection: "decoupled", isCap: null }).toWire().isCap).toBeNull();
    expect(new GRPOLoss({ offPolicyCorrection: "decoupled", isCap: 5 }).toWire().isCap).toBe(5);
    const dapo = new DAPOLoss({ offPolicyCorrection: "decoupled", isCap: 3 }).toWire();
    expect(dapo).toMatchObject({ type: "grpo", clipEpsilon: [0.2, 0.28], dualClip: 3, offPolicyCorrection: "decoupled", isCap: 3 });
    expect(JSON.parse(JSON.stringify(dapo))).toEqual(dapo);
    expect(createLoss("dapo", { offPolicyCorrection: "tis" }).toWire()).toMatchObject({ offPolicyCorrection: "tis", isCap: 2 });
  });

  it("is read back by the worker's parser to the same values", () => {
    const wires = [
      new GRPOLoss({ offPolicyCorrection: "tis" }).toWire(),
      new GRPOLoss({ offPolicyCorrection: "tis", isCap: 1.5, aggregation: "prompt_mean" }).toWire(),
      new DAPOLoss({ offPolicyCorrection: "decoupled" }).toWire(),
      new DAPOLoss({ offPolicyCorrection: "decoupled", isCap: 4 }).toWire(),
      new GRPOLoss().toWire(),
    ];
    const parsed = parseInWorker(wires);
    parsed.forEach((result, i) => {
      if (!result.ok) throw new Error(`${JSON.stringify(wires[i])}: ${result.message}`);
      expect(result.config).toMatchObject({ off_policy_correction: wires[i]!.offPolicyCorrection ?? "none", is_cap: wires[i]!.isCap ?? null });
    });
  });

  const cases: [string, () => unknown, string, string][] = [
    ["unknown mode", () => new GRPOLoss({ offPolicyCorrection: "is" as "tis" }), "offPolicyCorrection", "GRPOLoss options"],
    ["zero cap", () => new GRPOLoss({ offPolicyCorrection: "tis", isCap: 0 }), "isCap", "GRPOLoss options"],
    ["negative cap", () => new DAPOLoss({ offPolicyCorrection: "decoupled", isCap: -1 }), "isCap", "DAPOLoss options"],
    ["infinite cap", () => new GRPOLoss({ offPolicyCorrection: "tis", isCap: Infinity }), "isCap", "GRPOLoss options"],
    ["NaN cap", () => new GRPOLoss({ offPolicyCorrection: "tis", isCap: NaN }), "isCap", "GRPOLoss options"],
    ["cap not a number", () => new GRPOLoss({ offPolicyCorrection: "tis", isCap: "2" as unknown as number }), "isCap", "GRPOLoss options"],
    ["cap without a correction", () => new GRPOLoss({ isCap: 2 }), "isCap", "GRPOLoss options"],
    ["null cap without a correction", () => new GRPOLoss({ offPolicyCorrection: "none", isCap: null }), "isCap", "GRPOLoss options"],
    ["tis without a cap", () => new GRPOLoss({ offPolicyCorrection: "tis", isCap: null }), "isCap", "GRPOLoss options"],
    ["CISPO", () => new CISPOLoss({ offPolicyCorrection: "tis" as "none" }), "offPolicyCorrection", "CISPOLoss options"],
    ["GSPO", () => new GSPOLoss({ offPolicyCorrection: "decoupled" as "none" }), "offPolicyCorrection", "GSPOLoss options"],
    ["SAPO", () => new SAPOLoss({ offPolicyCorrection: "tis" as "none" }), "offPolicyCorrection", "SAPOLoss options"],
    ["SAPO cap", () => new SAPOLoss({ isCap: 2 as unknown as undefined }), "isCap", "SAPOLoss options"],
    ["createLoss cispo", () => createLoss("cispo", { offPolicyCorrection: "tis" }), "offPolicyCorrection", "CISPOLoss options"],
  ];
  for (const [name, make, field, where] of cases) {
    it(`rejects: ${name}`, () => {
      rejects(make, field, where);
    });
  }

  it("says why the other variants refuse it", () => {
    expect(() => new CISPOLoss({ offPolicyCorrection: "tis" as "none" })).toThrow(/only supported by GRPOLoss and DAPOLoss/);
    expect(() => new GRPOLoss({ isCap: 2 })).toThrow(/only used with offPolicyCorrection "tis" or "decoupled"/);
    // "none" is accepted everywhere (it is the default), and sends nothing
    expect("offPolicyCorrection" in new CISPOLoss({ offPolicyCorrection: "none" }).toWire()).toBe(false);
  });

  it("the worker rejects, naming the field, what the TS schemas reject", () => {
    const bad = [
      [{ type: "grpo", offPolicyCorrection: "is" }, "loss.offPolicyCorrection"],
      [{ type: "grpo", offPolicyCorrection: "tis", isCap: 0 }, "loss.isCap"],
      [{ type: "grpo", offPolicyCorrection: "tis", isCap: null }, "loss.isCap"],
      [{ type: "grpo", offPolicyCorrection: "decoupled", isCap: -2 }, "loss.isCap"],
      [{ type: "grpo", isCap: 2 }, "loss.isCap"],
      [{ type: "cispo", offPolicyCorrection: "tis" }, "loss.offPolicyCorrection"],
      [{ type: "gspo", offPolicyCorrection: "decoupled" }, "loss.offPolicyCorrection"],
      [{ type: "sapo", offPolicyCorrection: "tis" }, "loss.offPolicyCorrection"],
      [{ type: "sft", offPolicyCorrection: "tis" }, "loss.offPolicyCorrection"],
    ] as const;
    const parsed = parseInWorker(bad.map(([wire]) => wire));
    parsed.forEach((result, i) => {
      expect(result.ok, JSON.stringify(bad[i]![0])).toBe(false);
      if (!result.ok) {
        expect(result.code).toBe("BAD_ARGUMENTS");
        expect(result.message.startsWith(bad[i]![1])).toBe(true);
      }
    });
  });
});
