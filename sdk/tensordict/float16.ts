/**
 * Conversions between JavaScript numbers and the 16-bit float formats that tensors store as raw bits:
 * IEEE 754 half precision (`float16`) and brain float (`bfloat16`). Rounding is to nearest, ties to even;
 * NaN stays NaN and values beyond the range become ±Infinity. A number is first rounded to float32,
 * then to the 16-bit format.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The bfloat16 bit pattern (0..0xffff) nearest to `value`. */
export function numberToBfloat16Bits(value: number): number {
  f32[0] = value;
  const bits = u32[0]!;
  if (Number.isNaN(value)) return ((bits >>> 16) | 0x0040) & 0xffff;
  const roundingBias = 0x7fff + ((bits >>> 16) & 1);
  return ((bits + roundingBias) >>> 16) & 0xffff;
}

/** The number a bfloat16 bit pattern stands for. */
export function bfloat16BitsToNumber(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** The IEEE half-precision bit pattern (0..0xffff) nearest to `value`. */
export function numberToFloat16Bits(value: number): number {
  f32[0] = value;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  const mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa !== 0 ? 0x0200 | (mantissa >>> 13) : 0);
  const e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half (or zero): value = m × 2^-24.
    if (e < -10) return sign;
    const full = mantissa | 0x800000;
    const shift = 14 - e;
    let half = full >>> shift;
    const rest = full & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (half & 1) === 1)) half++; // a carry rolls into the exponent (up to Infinity)
  return sign | half;
}

/** The number an IEEE half-precision bit pattern stands for. */
export function float16BitsToNumber(bits: number): number {
  const sign = (bits & 0x8000) !== 0 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa !== 0 ? NaN : sign * Infinity;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

/** Decodes a whole array of float16 bit patterns into float32 values. */
export function float16ToFloat32Array(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = float16BitsToNumber(bits[i]!);
  return out;
}

/** Decodes a whole array of bfloat16 bit patterns into float32 values (exact). */
export function bfloat16ToFloat32Array(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  const outBits = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) outBits[i] = bits[i]! << 16;
  return out;
}

/** Encodes numbers as float16 bit patterns. */
export function float32ToFloat16Array(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = numberToFloat16Bits(values[i]!);
  return out;
}

/** Encodes numbers as bfloat16 bit patterns. */
export function float32ToBfloat16Array(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = numberToBfloat16Bits(values[i]!);
  return out;
}
