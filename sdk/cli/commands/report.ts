/** `posttrain report RUN_DIR`: (re)write a run directory's self-contained `report.html`. */
import { EXIT, UsageError, parseCommandArgs, say, stringFlag, type Command } from "../args.js";

const HELP = `Usage: posttrain report RUN_DIR [--title TEXT]

Write RUN_DIR/report.html from the run's metrics.jsonl, samples.jsonl and config.yaml: one self-contained
page (inline SVG plots, no script, no network) that opens in any browser, and print its path. Works on a run
that is still going or was interrupted.

Options:
  --title TEXT   Page title (default "posttrain run: RUN_DIR").
  -h, --help     Show this help.
`;

/** The `report` command. */
export const reportCommand: Command = {
  name: "report",
  summary: "Write RUN_DIR/report.html (plots of the run's metrics, samples, config) and print its path.",
  help: HELP,
  async run(args) {
    const { values, positionals, help } = parseCommandArgs("report", args, { title: { type: "string" } }, true);
    if (help) {
      process.stdout.write(HELP);
      return EXIT.ok;
    }
    const [runDir, ...extra] = positionals;
    if (runDir === undefined || extra.length > 0) {
      throw new UsageError(`expected one run directory, got ${String(positionals.length)}`, "report");
    }
    const title = stringFlag(values, "title");
    const { writeReport } = await import("../../reports/index.js");
    say(await writeReport(runDir, title === undefined ? {} : { title }));
    return EXIT.ok;
  },
};
