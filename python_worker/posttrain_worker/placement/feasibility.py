"""Fail fast on a placement the cluster can never satisfy, before waiting on Ray.

Ray keeps an infeasible placement group pending forever (waiting for the autoscaler); this check answers at
once when, with the alive nodes' TOTAL resources: a resource asked in total exceeds the cluster's total, a
bundle fits on no node, or ``STRICT_SPREAD`` cannot give every bundle a node of its own (a bipartite matching
of bundles to nodes that could host them). It is necessary, not sufficient: a placement that passes may still
wait for resources that other jobs hold, which ``placementTimeoutS`` bounds (``PLACEMENT_TIMEOUT``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain_worker.placement.messages import PLACEMENT_INFEASIBLE, DriverError

EPS = 1e-9
_NOISE_PREFIXES = ("node:", "accelerator_type:")
_NOISE = ("memory", "object_store_memory")


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    address: str
    total: dict[str, float]


def shown(resources: Mapping[str, float], keep: Sequence[str] = ()) -> dict[str, float]:
    """``resources`` without Ray's bookkeeping entries (``node:<ip>``, memory) unless named in ``keep``."""
    return {
        k: v
        for k, v in sorted(resources.items())
        if k in keep or not (k.startswith(_NOISE_PREFIXES) or k in _NOISE)
    }


def _fits(bundle: Mapping[str, float], total: Mapping[str, float]) -> bool:
    return all(total.get(k, 0.0) + EPS >= v for k, v in bundle.items())


def _spread_matching(bundles: Sequence[Mapping[str, float]], nodes: Sequence[NodeResources]) -> int:
    """How many bundles can each get a distinct node able to host it (Kuhn's augmenting paths)."""
    owner: dict[int, int] = {}

    def place(b: int, seen: set[int]) -> bool:
        for n, node in enumerate(nodes):
            if n in seen or not _fits(bundles[b], node.total):
                continue
            seen.add(n)
            if n not in owner or place(owner[n], seen):
                owner[n] = b
                return True
        return False

    return sum(1 for b in range(len(bundles)) if place(b, set()))


def summed(bundles: Sequence[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            total[k] = total.get(k, 0.0) + v
    return total


def describe(
    bundles: Sequence[Mapping[str, float]],
    strategy: str,
    nodes: Sequence[NodeResources],
    available: Mapping[str, float],
) -> tuple[str, dict[str, Any]]:
    """The message tail and details shared by PLACEMENT_INFEASIBLE and PLACEMENT_TIMEOUT: what was asked (per
    bundle and in total) and what the cluster has (per node and in total)."""
    asked_keys = sorted({k for b in bundles for k in b})
    per_node = (
        "; ".join(f"{n.node_id[:12]} ({n.address}) {shown(n.total, asked_keys)}" for n in nodes)
        or "no alive node"
    )
    text = (
        f"asked {len(bundles)} bundle(s) {[dict(b) for b in bundles]} with {strategy} "
        f"(total {summed(bundles)}); the cluster has {len(nodes)} alive node(s): {per_node}; "
        f"cluster total {shown(summed([n.total for n in nodes]), asked_keys)}, "
        f"available now {shown(available, asked_keys)}"
    )
    details = {
        "asked": [dict(b) for b in bundles],
        "available": dict(available),
        "nodes": [{"nodeId": n.node_id, "address": n.address, "resources": n.total} for n in nodes],
    }
    return text, details


def check_feasible(
    bundles: Sequence[Mapping[str, float]],
    strategy: str,
    nodes: Sequence[NodeResources],
    available: Mapping[str, float],
) -> None:
    """Raise ``PLACEMENT_INFEASIBLE`` when the alive ``nodes`` can never host ``bundles`` (``strategy``)."""
    cluster_total = summed([n.total for n in nodes])
    reasons: list[str] = []
    for name, asked in summed(bundles).items():
        if asked > cluster_total.get(name, 0.0) + EPS:
            reasons.append(
                f"{name}: {asked:g} asked in total, the cluster has {cluster_total.get(name, 0.0):g}"
            )
    for i, bundle in enumerate(bundles):
        if not any(_fits(bundle, n.total) for n in nodes):
            reasons.append(f"bundle {i} {dict(bundle)} fits on no node")
    if not reasons and strategy == "STRICT_SPREAD":
        placed = _spread_matching(bundles, nodes)
        if placed < len(bundles):
            reasons.append(
                f"STRICT_SPREAD needs a distinct node for each of the {len(bundles)} bundles, "
                f"only {placed} node(s) can host them"
            )
    if reasons:
        text, details = describe(bundles, strategy, nodes, available)
        raise DriverError(
            PLACEMENT_INFEASIBLE, f"placement infeasible: {'; '.join(reasons)}. {text}", details
        )
