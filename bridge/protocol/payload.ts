import type { DType } from "../wire/dtypes.js";

/**
 * A payload with its descriptor, as passed to and returned from {@link RPCChannel.request}. A tensordict's
 * Arrow stream is one frame, or several whose concatenation is the stream (a split payload,
 * docs/protocol.md: large tensors travel as frames of their own, without a copy).
 */
export type Payload =
  | { readonly kind: "tensordict"; readonly data: Uint8Array | readonly Uint8Array[] }
  | {
      readonly kind: "tensor";
      readonly dtype: DType;
      readonly shape: readonly number[];
      readonly name?: string;
      readonly data: Uint8Array;
    }
  | { readonly kind: "bytes"; readonly data: Uint8Array };
