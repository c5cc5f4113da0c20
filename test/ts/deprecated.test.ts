// The old names of CHANGELOG.md's "Renamed" table still work for one release: each is the renamed export itself.
/* eslint-disable @typescript-eslint/no-deprecated -- this file checks the deprecated names themselves */
import { describe, expect, it } from "vitest";
import * as bridge from "../../bridge/index.js";
import * as data from "../../sdk/data/index.js";
import * as envs from "../../sdk/envs/index.js";
import * as root from "../../sdk/index.js";
import * as trainers from "../../sdk/trainers/index.js";

describe("deprecated aliases", () => {
  it("are the renamed values, from the same entry points", () => {
    expect(trainers.ZmqWeightSyncScheme).toBe(trainers.ZMQWeightSyncScheme);
    expect(trainers.ZmqWeightSyncOptionsSchema).toBe(trainers.ZMQWeightSyncOptionsSchema);
    expect(envs.extractGsm8kAnswer).toBe(envs.extractGSM8KAnswer);
    expect(envs.normalizeGsm8kAnswer).toBe(envs.normalizeGSM8KAnswer);
    expect(data.SeededRng).toBe(data.SeededRNG);
    expect(bridge.RpcChannel).toBe(bridge.RPCChannel);
    expect(bridge.ZmqDealerTransport).toBe(bridge.ZMQDealerTransport);
    expect(root.ZmqWeightSyncScheme).toBe(root.ZMQWeightSyncScheme);
  });

  it("keep working as types and in instanceof checks", () => {
    const rng: data.SeededRng = new data.SeededRng(3);
    expect(rng).toBeInstanceOf(data.SeededRNG);
    const value: data.JsonValue = { a: [1, "b", null] } satisfies data.JSONValue;
    expect(value).toEqual({ a: [1, "b", null] });
    expect(envs.extractGsm8kAnswer("so #### 42")).toBe("42");
  });
});
