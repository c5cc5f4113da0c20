"""The worker package's layers (docs: STYLE.md, "Python mirrors it"): every ``posttrain_worker`` import,
read with ``ast`` (function-level and ``TYPE_CHECKING`` imports included), goes down the table below, and the
packages form no cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import posttrain_worker
import pytest

ROOT = Path(posttrain_worker.__file__).resolve().parent
TOP = "posttrain_worker"

# Bottom first. A package may import a package of a LOWER layer (never its own layer's siblings), and only on
# its own side or the base side; "top" may import any side. So the RPC side (protocol, server) knows no RL,
# and the RL side (models, losses, training, transfer) never sees the protocol or the server; methods join
# them. Within the RL side, training never imports transfer: the algorithm code never sees placement.
#
#   layer  package             side
LAYERS: tuple[tuple[int, str, str], ...] = (
    (0, TOP, "base"),  # posttrain_worker/__init__.py: the version numbers
    (0, "errors", "base"),  # WorkerFailure, the shared codes, render()
    (0, "sandbox", "base"),  # the tool sandbox's driver runs alone: imports nothing of the package
    (1, "validation", "base"),  # FieldReader: method arguments, config sections, loss configs
    (1, "curve", "base"),  # CURVE keys and the ZAP handler: the server's tcp socket and weight transfers
    (2, "codec", "base"),  # Arrow <-> torch, raw tensor frames, payload keys
    (3, "protocol", "rpc"),  # the envelope, protocol error codes
    (4, "server", "rpc"),  # sockets, the receive loop, the method registry
    (3, "models", "rl"),  # model store, generation, scoring, chat templates, prompts, the tiny model
    (3, "objectives", "rl"),  # the losses
    (3, "data", "rl"),  # datasets by Hub id or save_to_disk copy, as Arrow for the TS loaders (python -m)
    (4, "training", "rl"),  # trainer, optimizers, checkpoints, what a weight sync moves
    (5, "transfer", "rl"),  # weights between workers: ZeroMQ pair, torch.distributed
    (5, "control", "rl"),  # classic RL: MLP actor/critic, GAE, ClipPPOLoss, the PPO agent (reuses training)
    (6, "methods", "top"),  # the RPC glue: registers the RL code's entry points as worker methods
    (7, "cli", "top"),
    (7, "placement", "top"),  # the Ray driver and actor: programs of their own that start workers
    (7, "tracking", "top"),  # the experiment-tracker logger: a program of its own, one per run
    (8, "__main__", "top"),
)
LAYER = {package: layer for layer, package, _ in LAYERS}
SIDE = {package: side for _, package, side in LAYERS}


def allowed(source: str, target: str) -> bool:
    if LAYER[target] >= LAYER[source]:
        return False
    return SIDE[target] in ("base", SIDE[source]) or SIDE[source] == "top"


def module_name(path: Path) -> str:
    parts = [TOP, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """``posttrain_worker.models.tiny.cli`` -> ``models``; the package root stays ``posttrain_worker``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else TOP


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import of ``posttrain_worker`` in the file, relative ones resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from posttrain_worker import methods`` imports the subpackage, ``... import PROTOCOL_VERSION``
            # the package's __init__.
            names = [
                f"{base}.{alias.name}" if _is_submodule(base, alias.name) else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == TOP or name.startswith(TOP + "."):
                yield node.lineno, name


def _is_submodule(base: str, name: str) -> bool:
    if not (base == TOP or base.startswith(TOP + ".")):
        return False
    folder = ROOT.joinpath(*base.split(".")[1:])
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def package_imports() -> list[tuple[str, str, str]]:
    """``(source package, target package, "file:line")`` for every import that crosses packages."""
    edges = []
    for path in sorted(ROOT.rglob("*.py")):
        source = package_of(module_name(path))
        for line, target_module in imported_modules(path):
            target = package_of(target_module)
            if target != source:
                edges.append((source, target, f"{path.relative_to(ROOT.parent)}:{line}"))
    return edges


def test_every_package_has_a_layer() -> None:
    packages = {package_of(module_name(path)) for path in ROOT.rglob("*.py")}
    missing = sorted(packages - set(LAYER))
    assert not missing, f"packages with no row in LAYERS (decide where they sit): {missing}"


def test_imports_go_down_the_layers() -> None:
    wrong = [
        f"{where}: {source} (layer {LAYER[source]}, {SIDE[source]}) imports {target} "
        f"(layer {LAYER[target]}, {SIDE[target]})"
        for source, target, where in package_imports()
        if source in LAYER and target in LAYER and not allowed(source, target)
    ]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for source, target, _ in package_imports():
        graph.setdefault(source, set()).add(target)
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycle = [*trail[trail.index(nxt) :], nxt] if nxt in trail else [node, nxt]
                pytest.fail("package cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_parser_sees_the_imports_it_checks() -> None:
    """The checks above are only as good as the import reading: it finds a known import of each kind."""
    edges = {(source, target) for source, target, _ in package_imports()}
    assert ("methods", "server") in edges  # a top-level ``from ... import``
    assert ("training", "objectives") in edges  # one inside a function
    assert ("protocol", TOP) in edges  # ``from posttrain_worker import PROTOCOL_VERSION``
    assert ("cli", "methods") in edges
