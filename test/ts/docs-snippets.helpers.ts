// Extracts the TypeScript code blocks of markdown files and typechecks them, all in one TypeScript program, as
// modules that import the repository's sources instead of the published package. Used by docs-snippets.test.ts.
//
// A ```ts / ```typescript block is checked as its own ES module (top-level await allowed), under the repository's
// tsconfig.json options. An HTML comment on the line before the fence (blank lines between are allowed) changes that:
//
//   <!-- snippet: continue -->       the block continues the previous checked block of the same file: the two (and
//                                    what that one continued) are checked as one module, as a reader runs them in order
//   <!-- snippet: skip (reason) -->  not checked; for fragments that cannot stand alone. The reason is required.
//
// `posttrain` and `posttrain/<sub>` imports are rewritten to the sources that package.json's "exports" map publishes
// (`./dist/sdk/data/index.d.ts` -> `sdk/data/index.ts`), so the snippets check against the code in the checkout, with
// no build. The modules exist only in memory: nothing is written to disk.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

export const ROOT = resolve(import.meta.dirname, "..", "..");
/** Where the in-memory snippet modules pretend to live (inside the repo, so node_modules and package.json apply). */
const SNIPPET_DIR = join(ROOT, "test", ".snippets");
const LANGUAGES = new Set(["ts", "typescript"]);
const DIRECTIVE = /^<!--\s*snippet:\s*(.*?)\s*-->$/;

export interface Snippet {
  /** The markdown file, relative to the repository root (e.g. `docs/tools.md`). */
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly fenceLine: number;
  /** The code between the fences. */
  readonly code: string;
  /** `skip (reason)`: not checked. */
  readonly skip: string | null;
  /** `continue`: checked together with the previous checked block of the file. */
  readonly continues: boolean;
}

/** The place of a snippet, as `file:line` of its opening fence. */
export function where(s: Pick<Snippet, "file" | "fenceLine">): string {
  return `${s.file}:${s.fenceLine}`;
}

/** The ```ts and ```typescript blocks of a markdown text, with their directives. Throws on a malformed file. */
export function extractSnippets(file: string, markdown: string): Snippet[] {
  const lines = markdown.split(/\r?\n/);
  const out: Snippet[] = [];
  let i = 0;
  while (i < lines.length) {
    const open = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/.exec(lines[i]!);
    if (open === null) {
      i++;
      continue;
    }
    const fence = open[1]!;
    const language = open[2]!.toLowerCase();
    const fenceLine = i + 1;
    let end = i + 1;
    const close = new RegExp(`^ {0,3}${fence[0]!}{${fence.length},}\\s*$`);
    while (end < lines.length && !close.test(lines[end]!)) end++;
    if (end >= lines.length) throw new Error(`${file}:${fenceLine}: the code block is never closed`);
    const directive = directiveBefore(lines, i);
    if (LANGUAGES.has(language)) {
      const parsed = parseDirective(file, fenceLine, directive);
      out.push({ file, fenceLine, code: lines.slice(i + 1, end).join("\n"), ...parsed });
    } else if (directive !== null) {
      throw new Error(`${file}:${fenceLine}: a snippet directive before a block that is not TypeScript ("${language}")`);
    }
    i = end + 1;
  }
  return out;
}

/** The `<!-- snippet: ... -->` text on the last non-blank line before line `index`, if any. */
function directiveBefore(lines: readonly string[], index: number): string | null {
  for (let j = index - 1; j >= 0; j--) {
    const line = lines[j]!.trim();
    if (line === "") continue;
    return DIRECTIVE.exec(line)?.[1] ?? null;
  }
  return null;
}

function parseDirective(file: string, fenceLine: number, directive: string | null): Pick<Snippet, "skip" | "continues"> {
  if (directive === null) return { skip: null, continues: false };
  if (directive === "continue") return { skip: null, continues: true };
  const skip = /^skip\s*\((.+)\)$/.exec(directive);
  if (skip !== null) return { skip: skip[1]!.trim(), continues: false };
  throw new Error(
    `${file}:${fenceLine}: unknown snippet directive "${directive}" (expected "continue" or "skip (reason)", the reason required)`,
  );
}

/** package.json "exports": specifier ("posttrain", "posttrain/data", ...) -> absolute path of the source entry point. */
export function sourceEntryPoints(): Map<string, string> {
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
    name: string;
    exports: Record<string, string | { types?: string }>;
  };
  const entries = new Map<string, string>();
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    const types = typeof target === "string" ? target : target.types;
    if (types === undefined || !types.endsWith(".d.ts")) continue; // "./package.json"
    const source = join(ROOT, types.replace(/^\.\/dist\//, "").replace(/\.d\.ts$/, ".ts"));
    if (!existsSync(source)) throw new Error(`package.json exports["${subpath}"]: no source file ${relative(ROOT, source)}`);
    entries.set(subpath === "." ? pkg.name : `${pkg.name}/${subpath.replace(/^\.\//, "")}`, source);
  }
  return entries;
}

/** One module of the program: a chain of snippets (one, or one plus those that continue it). */
interface SnippetModule {
  readonly path: string;
  readonly text: string;
  /** Per line of `text` (0-based): the snippet it comes from and its line in the markdown file (1-based). */
  readonly origin: readonly { readonly snippet: Snippet; readonly line: number }[];
}

export interface SnippetFailure {
  readonly snippet: Snippet;
  /** One line per diagnostic: `file:line:column TSxxxx: message`, with the markdown file's line. */
  readonly diagnostics: readonly string[];
}

export interface CheckResult {
  /** Snippets typechecked. */
  readonly checked: readonly Snippet[];
  readonly skipped: readonly Snippet[];
  readonly failures: readonly SnippetFailure[];
  /** Diagnostics that belong to no snippet (compiler options, global types). */
  readonly global: readonly string[];
  readonly elapsedMs: number;
}

/** Rewrites `posttrain` imports to relative imports of the sources; lines keep their number. */
function rewriteImports(code: string, modulePath: string, entries: ReadonlyMap<string, string>, problems: string[]): string {
  return code.replace(
    /(\bfrom\s*|\bimport\s*\(?\s*)(["'])(posttrain(?:\/[^"']*)?)\2/g,
    (whole, lead: string, quote: string, specifier: string) => {
      const source = entries.get(specifier);
      if (source === undefined) {
        problems.push(`import "${specifier}": not in package.json "exports" (${[...entries.keys()].join(", ")})`);
        return whole;
      }
      let rel = relative(dirname(modulePath), source).replace(/\\/g, "/").replace(/\.ts$/, ".js");
      if (!rel.startsWith(".")) rel = `./${rel}`;
      return `${lead}${quote}${rel}${quote}`;
    },
  );
}

function buildModules(snippets: readonly Snippet[], entries: ReadonlyMap<string, string>): {
  modules: SnippetModule[];
  importProblems: Map<Snippet, string[]>;
} {
  const chains: Snippet[][] = [];
  const lastChainOfFile = new Map<string, Snippet[]>();
  for (const s of snippets) {
    if (s.skip !== null) continue;
    if (s.continues) {
      const chain = lastChainOfFile.get(s.file);
      if (chain === undefined) throw new Error(`${where(s)}: "snippet: continue" but no checked block comes before it`);
      chain.push(s);
    } else {
      const chain = [s];
      chains.push(chain);
      lastChainOfFile.set(s.file, chain);
    }
  }
  const importProblems = new Map<Snippet, string[]>();
  const modules = chains.map((chain) => {
    const head = chain[0]!;
    const path = join(SNIPPET_DIR, `${head.file.replace(/[^\w.-]+/g, "_")}_L${head.fenceLine}.ts`);
    const texts: string[] = [];
    const origin: { snippet: Snippet; line: number }[] = [];
    for (const s of chain) {
      const problems: string[] = [];
      const code = rewriteImports(s.code, path, entries, problems);
      if (problems.length > 0) importProblems.set(s, problems);
      const codeLines = code.split("\n");
      codeLines.forEach((line, k) => {
        texts.push(line);
        origin.push({ snippet: s, line: s.fenceLine + 1 + k });
      });
    }
    return { path, text: `${texts.join("\n")}\n`, origin };
  });
  return { modules, importProblems };
}

const OUTPUT_OPTIONS = new Set(["declaration", "declarationMap", "sourceMap", "outDir", "composite", "incremental", "tsBuildInfoFile"]);

/** The repository's compiler options (tsconfig.json), for a check without output. */
function compilerOptions(): ts.CompilerOptions {
  const configPath = join(ROOT, "tsconfig.json");
  const read = ts.readConfigFile(configPath, (p) => ts.sys.readFile(p));
  if (read.error !== undefined) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, "\n"));
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, ROOT, undefined, configPath);
  if (parsed.errors.length > 0) {
    throw new Error(parsed.errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")).join("\n"));
  }
  // Type errors only: no output options, and every snippet is a module (top-level await), imports or not.
  const options: ts.CompilerOptions = Object.fromEntries(Object.entries(parsed.options).filter(([key]) => !OUTPUT_OPTIONS.has(key)));
  return { ...options, noEmit: true, moduleDetection: ts.ModuleDetectionKind.Force };
}

function formatDiagnostic(d: ts.Diagnostic): string {
  return `TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n  ")}`;
}

/** Typechecks the snippets (those not skipped) in one program. */
export function checkSnippets(snippets: readonly Snippet[]): CheckResult {
  const started = performance.now();
  const entries = sourceEntryPoints();
  const { modules, importProblems } = buildModules(snippets, entries);
  const byPath = new Map(modules.map((m) => [m.path, m]));
  const options = compilerOptions();
  const base = ts.createCompilerHost(options);
  const host: ts.CompilerHost = {
    ...base,
    fileExists: (f) => byPath.has(f) || base.fileExists(f),
    readFile: (f) => byPath.get(f)?.text ?? base.readFile(f),
    getSourceFile: (f, languageVersion, onError, shouldCreate) => {
      const m = byPath.get(f);
      return m === undefined ? base.getSourceFile(f, languageVersion, onError, shouldCreate) : ts.createSourceFile(f, m.text, languageVersion);
    },
  };
  const program = ts.createProgram({ rootNames: modules.map((m) => m.path), options, host });

  const perSnippet = new Map<Snippet, string[]>();
  for (const [s, problems] of importProblems) perSnippet.set(s, problems.map((p) => `${s.file}:${s.fenceLine}: ${p}`));
  for (const m of modules) {
    const sf = program.getSourceFile(m.path);
    if (sf === undefined) throw new Error(`${m.path}: not in the program`);
    for (const d of [...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf)]) {
      const { line, character } = sf.getLineAndCharacterOfPosition(d.start ?? 0);
      const o = m.origin[Math.min(line, m.origin.length - 1)]!;
      const list = perSnippet.get(o.snippet) ?? [];
      list.push(`${o.snippet.file}:${o.line}:${character + 1} ${formatDiagnostic(d)}`);
      perSnippet.set(o.snippet, list);
    }
  }
  const global = [...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics()].map(formatDiagnostic);
  const checked = snippets.filter((s) => s.skip === null);
  return {
    checked,
    skipped: snippets.filter((s) => s.skip !== null),
    failures: checked.flatMap((s) => {
      const diagnostics = perSnippet.get(s);
      return diagnostics === undefined ? [] : [{ snippet: s, diagnostics }];
    }),
    global,
    elapsedMs: performance.now() - started,
  };
}

/** A report of the failures, one block per snippet. */
export function formatFailures(failures: readonly SnippetFailure[]): string {
  return failures
    .map((f) => `${where(f.snippet)} (\`\`\`ts block starting here):\n${f.diagnostics.map((d) => `  ${d}`).join("\n")}`)
    .join("\n\n");
}
