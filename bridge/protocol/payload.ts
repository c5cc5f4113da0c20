import type { DType } from "../wire/dtypes.js";

/** A payload frame with its descriptor, as passed to and returned from {@link RPCChannel.request}. */
export type Payload =
  | { readonly kind: "tensordict"; readonly data: Uint8Array }
  | {
      readonly kind: "tensor";
      readonly dtype: DType;
      readonly shape: readonly number[];
      readonly name?: string;
      readonly data: Uint8Array;
    }
  | { readonly kind: "bytes"; readonly data: Uint8Array };
