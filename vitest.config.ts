import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/ts/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Worker tests start real Python processes: keep parallelism within 2 cores.
    maxWorkers: 2,
  },
});
