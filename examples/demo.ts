// `npm run demo` — for now, the foundation at work: real Python workers, real torch, real ZeroMQ + Arrow.
// It starts two CPU/GPU workers, sends each half of a batch of RL-shaped data (ragged int64 token ids,
// bfloat16 logits, bool masks, strings, nested keys), has torch compute per-row sums, checks every value
// against the same sums computed here, then measures the TensorDict transfer rate.
// `--quick` (or POSTTRAIN_QUICK=1) skips the 64 MB transfer, for CI.
import { RaggedTensor, Tensor, TensorDict, WorkerPool } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const rows = 64;
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

function makeBatch(): TensorDict {
  let seed = 12345;
  const rand = (): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const lengths = Array.from({ length: rows }, () => 5 + Math.floor(rand() * 36));
  const offsets = new Int32Array(rows + 1);
  lengths.forEach((len, i) => (offsets[i + 1] = offsets[i]! + len));
  const tokens = BigInt64Array.from({ length: offsets[rows]! }, () => BigInt(Math.floor(rand() * 32000)));
  const rewards = Float32Array.from({ length: rows }, () => Math.round(rand() * 4) / 4);
  const mask = Uint8Array.from({ length: rows * 8 }, () => (rand() < 0.7 ? 1 : 0));
  const logits = Tensor.from(Float32Array.from({ length: rows * 8 }, () => rand() * 2 - 1), { dtype: "float32", shape: [rows, 8] });
  return new TensorDict(
    {
      tokens: new RaggedTensor("int64", tokens, offsets, []),
      logits: logits.to("bfloat16"),
      mask: Tensor.from(mask, { dtype: "bool", shape: [rows, 8] }),
      prompt: Array.from({ length: rows }, (_, i) => `What is ${i} + ${i}?`),
      next: { reward: Tensor.from(rewards, { dtype: "float32", shape: [rows] }) },
    },
    { batchSize: [rows] },
  );
}

/** The per-row sums the worker should return, computed in TypeScript. */
function expectedSums(td: TensorDict): Map<string, number[]> {
  const out = new Map<string, number[]>();
  const tokens = td.getRagged("tokens");
  out.set("tokens", Array.from({ length: td.batchSize[0]! }, (_, r) => tokens.row(r).toArray().flat(Infinity).reduce<number>((s, v) => s + Number(v), 0)));
  for (const key of ["logits", "mask"] as const) {
    const t = td.getTensor(key).toFloat32Array();
    const width = t.length / td.batchSize[0]!;
    out.set(key, Array.from({ length: td.batchSize[0]! }, (_, r) => t.subarray(r * width, (r + 1) * width).reduce((s, v) => s + v, 0)));
  }
  out.set("prompt", td.getStrings("prompt").map((s) => s.length));
  out.set("next.reward", Array.from(td.getTensor(["next", "reward"]).toFloat32Array()));
  return out;
}

const started = performance.now();
say("posttrain demo: the foundation (TensorDict + Arrow over ZeroMQ + torch workers)");
const pool = await WorkerPool.local({ workers: 2, device: "auto" });
try {
  for (const w of pool.workers) {
    const dev = w.info.devices.map((d) => d.name).join(", ");
    say(`  ${w.name}: pid ${w.info.pid}, python ${w.info.python}, torch ${w.info.torch}, devices: ${dev}`);
  }
  const batch = makeBatch();
  const halves = batch.split(rows / 2);
  const results = await Promise.all(halves.map((half, i) => pool.worker(i).rowSums(half)));
  const sums = TensorDict.cat(results);
  let worst = 0;
  let checked = 0;
  for (const [key, want] of expectedSums(batch)) {
    const got = sums.getTensor(key.split(".")).toFloat32Array();
    want.forEach((v, r) => {
      worst = Math.max(worst, Math.abs(got[r]! - v) / Math.max(1, Math.abs(v)));
      checked++;
    });
  }
  say(`  row sums from torch: ${checked} values over ${sums.keys({ nested: true, leavesOnly: true }).length} leaves, worst relative error ${worst.toExponential(2)}`);
  if (worst > 1e-5) throw new Error(`row sums disagree (worst relative error ${worst})`);

  if (quick) {
    say("  quick mode: skipping the 64 MB transfer");
  } else {
    const big = new TensorDict({ x: Tensor.zeros("float32", [16384, 1024]) }, { batchSize: [16384] });
    const t0 = performance.now();
    const back = await pool.worker(0).echo(big);
    const ms = performance.now() - t0;
    const mb = (2 * big.toArrow().byteLength) / 2 ** 20;
    say(`  echo of a 64 MB TensorDict through torch: ${ms.toFixed(0)} ms round trip, ${(mb / (ms / 1000)).toFixed(0)} MB/s (batch ${back.batchSize.join("x")})`);
  }
} finally {
  await pool.close();
}
say(`done in ${((performance.now() - started) / 1000).toFixed(1)} s; workers stopped, sockets removed`);
