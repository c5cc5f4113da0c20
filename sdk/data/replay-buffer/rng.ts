/**
 * The seeded pseudo-random generator of the replay buffer: xoshiro128** seeded through splitmix32. Its state is four
 * 32-bit words that `ReplayBuffer.save` stores, so a loaded buffer continues the same stream.
 */
import { InvalidArgumentError } from "./errors.js";

function splitmix32(seed: number): () => number {
  let a = seed | 0;
  return () => {
    a = (a + 0x9e3779b9) | 0;
    let t = a ^ (a >>> 16);
    t = Math.imul(t, 0x21f0aaad);
    t ^= t >>> 15;
    t = Math.imul(t, 0x735a2d97);
    return (t ^ (t >>> 15)) >>> 0;
  };
}

const rotl = (x: number, k: number): number => (x << k) | (x >>> (32 - k));

/** A seeded source of random numbers (xoshiro128**); the same seed gives the same draws on every platform. */
export class SeededRNG {
  readonly #s = new Uint32Array(4);

  /**
   * A generator seeded with `seed` (a non-negative safe integer); without a seed, one is drawn from
   * `crypto.getRandomValues`.
   */
  constructor(seed?: number) {
    if (seed === undefined) {
      globalThis.crypto.getRandomValues(this.#s);
      if (this.#s.every((w) => w === 0)) this.#s[0] = 1;
      return;
    }
    if (!Number.isSafeInteger(seed) || seed < 0) throw new InvalidArgumentError(`SeededRNG: seed must be a non-negative safe integer, got ${String(seed)}`);
    const next = splitmix32((seed >>> 0) ^ Math.imul(Math.floor(seed / 2 ** 32), 0x85ebca6b));
    for (let i = 0; i < 4; i++) this.#s[i] = next();
  }

  /** A generator that continues from a state returned by `state()`. */
  static fromState(state: readonly number[]): SeededRNG {
    if (state.length !== 4 || !state.every((w) => Number.isInteger(w) && w >= 0 && w < 2 ** 32) || state.every((w) => w === 0)) {
      throw new InvalidArgumentError(`SeededRNG.fromState: expected four 32-bit words, not all zero, got ${JSON.stringify(state)}`);
    }
    const rng = new SeededRNG(0);
    rng.#s.set(state);
    return rng;
  }

  /** The current state (four 32-bit words). */
  state(): number[] {
    return Array.from(this.#s);
  }

  /** The next 32 random bits, as an unsigned integer. */
  nextUint32(): number {
    const s = this.#s;
    const result = Math.imul(rotl(Math.imul(s[1]!, 5), 7), 9) >>> 0;
    const t = s[1]! << 9;
    s[2]! ^= s[0]!;
    s[3]! ^= s[1]!;
    s[1]! ^= s[2]!;
    s[0]! ^= s[3]!;
    s[2]! ^= t;
    s[3] = rotl(s[3]!, 11);
    return result;
  }

  /** A uniform float in [0, 1) with 53 random bits. */
  random(): number {
    const hi = this.nextUint32() >>> 5; // 27 bits
    const lo = this.nextUint32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** A uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.random() * n);
  }

  /** A uniformly random permutation of 0..n-1 (Fisher–Yates). */
  permutation(n: number): Int32Array {
    const out = new Int32Array(n);
    for (let i = 0; i < n; i++) out[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const tmp = out[i]!;
      out[i] = out[j]!;
      out[j] = tmp;
    }
    return out;
  }
}
