/** What a worker answers to the weight methods (`sync_weights`, `weights_listen`, `weights_send`, ...). */
import { z } from "zod";

/** The reply of a sync that moved weights into a model: its new policy version and the bytes moved. */
export const WeightSyncReplySchema = z.object({
  policyVersion: z.number().int().nonnegative(),
  bytes: z.number().int().nonnegative(),
});

/** The reply of `weights_listen`: the token `weights_receive` takes and the endpoint the sender connects to. */
export const WeightsListenReplySchema = z.object({ token: z.string(), endpoint: z.string() });

/** The reply of `dist_close`: whether a process group was left. */
export const DistCloseReplySchema = z.object({ closed: z.boolean() });

/** The reply of `weights_get` (the tensors come as raw payload frames, one per parameter). */
export const WeightsGetReplySchema = z.object({ policyVersion: z.number().int().nonnegative() });

/** The reply of `weights_digest`: a fingerprint of a model's weights (see `WorkerClient.weightsDigest`). */
export const WeightsDigestSchema = z.object({
  /** The model's policy version. */
  policyVersion: z.number().int().nonnegative(),
  /** sha256 (hex) over every parameter's name, dtype, shape and raw bytes, in name order. */
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  /** Parameters hashed (tied weights once). */
  tensors: z.number().int().nonnegative(),
  /** Bytes hashed. */
  bytes: z.number().int().nonnegative(),
});

/** A fingerprint of a model's weights: equal digests mean bit-identical weights (`WorkerClient.weightsDigest`). */
export type WeightsDigest = z.output<typeof WeightsDigestSchema>;
