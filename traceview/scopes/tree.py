"""The scope tree of an analysis: the op table's numbers summed over every prefix of each op's path.

Columnar: op_names are parsed once per distinct name, ops are summed per
distinct path, and those sums are spread to every prefix of the path with one
merge and one groupby, so the cost grows with the distinct paths, never with
the executions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceview.analysis.build import PipelineResult
from traceview.errors import UserError
from traceview.scopes.paths import MAX_COMPONENTS, PASSES, parse_op_name
from traceview.scopes.source import line_texts
from traceview.timeline.overlap import Overlap
from traceview.units import PS_PER_US, counted

BOUND_NAMES = ("compute", "memory", "communication", "unknown")
BY = ("scope", "source")
# Per-node columns of ScopeTree.nodes (times in microseconds).
NODE_COLUMNS = ["path", "depth", "name", "self_us", "total_us", "gain_us", "self_gain_us", "wall_gain_us",
                "self_wall_gain_us", "efficiency",
                *[f"{b}_us" for b in BOUND_NAMES], *[f"{p}_us" for p in PASSES],
                "flops", "bytes_accessed", "ops", "text"]
_SUMS = ["time", "gain", "roof", "roof_judged", "flops", "bytes", "ops",
         *[f"b_{b}" for b in BOUND_NAMES], *[f"p_{p}" for p in PASSES]]
_NULLABLE = ("gain", "roof", "roof_judged", "flops", "bytes")   # all unknown -> NaN, never 0


@dataclass
class ScopeTree:
    """One analysis by scope or by source line.

    ``nodes``: one row per tree node (NODE_COLUMNS; depth-first, siblings by total
    time, largest first). ``op_paths``: per row of the analysis' op table, its
    path (a tuple) or None when unattributed. ``total_us`` is the op self time
    the analysis accounts; the roots' ``total_us`` plus ``unattributed_us`` equal it.
    ``judged``: whether a target chip judged the ops (else bound, gain and efficiency are unknown).
    ``overlap``: the devices' op time against their busy time (timeline.overlap): ``gain_us`` is op
    time, ``wall_gain_us`` the wall time it stands for (never more than the busy time).
    """

    by: str
    nodes: pd.DataFrame
    op_paths: pd.Series
    total_us: float
    unattributed_us: float
    judged: bool
    warnings: list[str] = field(default_factory=list)
    overlap: Overlap = field(default_factory=lambda: Overlap(0.0, 0.0))
    projected_onto: str | None = None    # the target, when it is not the chip the trace ran on

    @property
    def attributed_share(self) -> float | None:
        """Share of the op time placed on a path (None when there is no op time)."""
        return (self.total_us - self.unattributed_us) / self.total_us if self.total_us > 0 else None

    @property
    def roots(self) -> pd.DataFrame:
        return self.nodes[self.nodes["depth"] == 1]

    def under(self, path: tuple[str, ...] | list[str] | str) -> np.ndarray:
        """Mask over the op table: the ops at ``path`` (a node's ``path``, program first; a list, or one
        program's name, too) or below it. A path of another type would match no op, silently: a UserError."""
        wanted = node_path(path)
        n = len(wanted)
        return np.fromiter((p is not None and p[:n] == wanted for p in self.op_paths),
                           dtype=bool, count=len(self.op_paths))

    def top_by_gain(self, n: int = 3) -> pd.DataFrame:
        """The ``n`` scopes whose own ops (placed at the scope itself, not below it) have the most gain in
        wall time: the innermost named scopes, where a code change goes (a parent's gain is its children's)."""
        nodes = self.nodes[self.nodes["self_wall_gain_us"].notna() & (self.nodes["self_wall_gain_us"] > 0)]
        return nodes.sort_values("self_wall_gain_us", ascending=False, kind="stable").head(n)


def node_path(path: object) -> tuple[str, ...]:
    """A node's path as the tree keeps it (a tuple of names) from a tuple, a list or one name."""
    if isinstance(path, str):
        return (path,)
    if isinstance(path, (tuple, list)) and all(isinstance(name, str) for name in path):
        return tuple(path)
    raise UserError(f"path={path!r}: expected a node's path, a tuple of names such as ('jit_train_step', 'layer_0')")


def dominant_bound(node: dict) -> str | None:
    """The bound holding most of a node's time (a row of ``ScopeTree.nodes``); None when no time is judged."""
    times = {b: node[f"{b}_us"] for b in BOUND_NAMES}
    best = max(times, key=lambda b: times[b])
    return best if times[best] > 0 else None


def program_name(module: str) -> str:
    """A module's jitted function: jit_train_step -> train_step (the name op_names start with)."""
    for prefix in ("jit_", "pjit_"):
        if module.startswith(prefix) and len(module) > len(prefix):
            return module[len(prefix):]
    return module or "?"


def _scope_paths(ops: pd.DataFrame) -> tuple[list, np.ndarray]:
    """Per op: (program,) + its scopes, or None without op_name metadata; and its pass. Parsed once per
    distinct op_name, and a path built once per distinct (op_name, module)."""
    column = ops["op_name"].astype(object) if "op_name" in ops.columns else pd.Series("", index=ops.index)
    names = column.where(column.notna(), "").astype(str)
    name_codes, name_uniques = pd.factorize(names, sort=False)
    module_codes, module_uniques = pd.factorize(ops["module"].astype(str), sort=False)
    parsed = [parse_op_name(u) for u in name_uniques]
    width = len(module_uniques) + 1
    pair_codes, pairs = pd.factorize(name_codes.astype(np.int64) * width + module_codes, sort=False)
    pair_paths: list = []
    pair_passes: list = []
    for pair in pairs:
        found = parsed[pair // width]
        module = module_uniques[pair % width] if pair % width < len(module_uniques) else ""
        pair_paths.append(None if found is None else
                          ((program_name(module) if module else (found.program or "?")),) + found.scopes)
        pair_passes.append("other" if found is None else found.pass_)
    paths = np.empty(len(pair_paths), dtype=object)
    paths[:] = pair_paths
    return list(paths[pair_codes]), np.asarray(pair_passes, dtype=object)[pair_codes]


def _source_paths(ops: pd.DataFrame) -> tuple[list, np.ndarray]:
    """Per op: (file, function, line), (file, line) when the function is unknown, (file,) when the line is
    too, or None without a source file; and its pass (from its op_name)."""
    def text(name: str) -> np.ndarray:
        if name not in ops.columns:
            return np.full(len(ops), "", dtype=object)
        column = ops[name].astype(object)
        return column.where(column.notna(), "").astype(str).to_numpy()

    files, functions = text("source_file"), text("source_function")
    lines = ops["source_line"].to_numpy(dtype="float64") if "source_line" in ops.columns else \
        np.full(len(ops), np.nan)
    paths = [None if not f else (f, *((fn,) if fn else ()), str(int(n))) if np.isfinite(n) else (f,)
             for f, fn, n in zip(files, functions, lines)]
    _, passes = _scope_paths(ops)
    return paths, passes


def _op_values(ops: pd.DataFrame, passes: np.ndarray, judged: bool, projected: bool) -> pd.DataFrame:
    """Per op, the additive quantities a node sums (ps, FLOPs, bytes). Projected onto another chip, an op's
    efficiency is against its projected time (as the op table's), so a node's is too."""
    time = ops["self_time_ps"].to_numpy(dtype="float64")
    col = lambda name: ops[name].to_numpy(dtype="float64") if name in ops.columns else np.full(len(ops), np.nan)  # noqa: E731
    roof = col("roofline_time_ps")
    judged_time = col("projected_time_ps" if projected and "projected_time_ps" in ops.columns else "judged_time_ps")
    values = {"time": time, "gain": col("gain_ps"), "roof": roof,
              "roof_judged": np.where(np.isfinite(roof), judged_time, np.nan),
              "flops": col("flops"), "bytes": col("bytes_accessed"), "ops": np.ones(len(ops))}
    bound = ops["bound"].astype(object).to_numpy() if judged and "bound" in ops.columns else \
        np.full(len(ops), None, dtype=object)
    for b in BOUND_NAMES:
        hit = (bound == b) | ((b == "unknown") & pd.isna(bound))
        values[f"b_{b}"] = np.where(hit, time, 0.0)
    for p in PASSES:
        values[f"p_{p}"] = np.where(passes == p, time, 0.0)
    return pd.DataFrame(values)


def _sum(frame: pd.DataFrame, by) -> pd.DataFrame:
    grouped = frame.groupby(by, sort=False)
    out = grouped[[c for c in _SUMS if c not in _NULLABLE]].sum()
    for c in _NULLABLE:
        out[c] = grouped[c].sum(min_count=1)
    return out


def build_scopes(pipeline: PipelineResult, by: str = "scope") -> ScopeTree:
    """The tree of ``pipeline`` by named scope (``by="scope"``) or by source file and line (``"source"``)."""
    if by not in BY:
        raise ValueError(f"by must be one of {BY}, not {by!r}")
    ops = pipeline.ops
    judged = pipeline.judged is not None
    projected_onto = pipeline.judged.chip.name if pipeline.judged is not None and pipeline.judged.projected else None
    paths, passes = (_scope_paths if by == "scope" else _source_paths)(ops)
    values = _op_values(ops, passes, judged, projected_onto is not None)
    total_ps = float(np.nansum(values["time"]))
    attributed = np.fromiter((p is not None for p in paths), dtype=bool, count=len(paths))
    unattributed_ps = float(np.nansum(values["time"].to_numpy()[~attributed]))
    op_paths = pd.Series(paths, index=ops.index, dtype=object)
    nodes = _nodes(values[attributed], [p for p in paths if p is not None], by)
    overlap = Overlap(float(pipeline.op_time_ps), float(pipeline.device_time_ps))
    nodes["wall_gain_us"] = nodes["gain_us"] * overlap.factor
    nodes["self_wall_gain_us"] = nodes["self_gain_us"] * overlap.factor
    nodes = nodes[NODE_COLUMNS]
    warnings = _warnings(by, judged, total_ps, unattributed_ps, int((~attributed).sum()), ops, attributed)
    if projected_onto is not None:
        warnings.append(f"projected onto {projected_onto}: times are as measured on the capture chip; gain and "
                        "efficiency are against the projected times (docs/api.md)")
    if overlap.overlapped and judged:
        warnings.append(overlap.describe() + ": wall_gain_us states each gain in wall time")
    return ScopeTree(by, nodes, op_paths, total_ps / PS_PER_US, unattributed_ps / PS_PER_US, judged, warnings,
                     overlap, projected_onto)


def _nodes(values: pd.DataFrame, paths: list[tuple], by: str) -> pd.DataFrame:
    if not paths:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("path", "name", "text") else "float64")
                             for c in NODE_COLUMNS})
    path_codes, unique_paths = pd.factorize(pd.Series(paths, dtype=object), sort=False)
    per_path = _sum(values.assign(path=path_codes), "path")              # one row per distinct path
    # Every prefix of every distinct path: (path code, node) pairs, then one groupby.
    link_path, link_node = [], []
    for code, path in enumerate(unique_paths):
        for k in range(1, min(len(path), MAX_COMPONENTS) + 1):
            link_path.append(code)
            link_node.append(path[:k])
    link = pd.DataFrame({"path": link_path, "node": pd.Series(link_node, dtype=object)})
    spread = link.merge(per_path, left_on="path", right_index=True, how="left")
    totals = _sum(spread.drop(columns="path"), "node")
    at_path = pd.Index(list(unique_paths), tupleize_cols=False)
    self_time = pd.Series(per_path["time"].to_numpy(), index=at_path)
    self_gain = pd.Series(per_path["gain"].to_numpy(), index=at_path)
    node_paths = list(totals.index)
    out = pd.DataFrame({"path": pd.Series(node_paths, dtype=object)})
    out["depth"] = [len(p) for p in node_paths]
    out["name"] = [p[-1] for p in node_paths]
    node_index = pd.Index(node_paths, tupleize_cols=False)
    out["self_us"] = self_time.reindex(node_index).fillna(0.0).to_numpy() / PS_PER_US
    t = totals.reset_index(drop=True)
    out["total_us"] = t["time"].to_numpy() / PS_PER_US
    out["gain_us"] = t["gain"].to_numpy() / PS_PER_US
    # no op at the node itself: no own gain (0); ops there with unknown gain: unknown (NaN)
    own = self_gain.reindex(node_index).to_numpy() / PS_PER_US
    out["self_gain_us"] = np.where(node_index.isin(at_path), own, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["efficiency"] = np.where(t["roof_judged"] > 0, t["roof"] / t["roof_judged"], np.nan)
    for b in BOUND_NAMES:
        out[f"{b}_us"] = t[f"b_{b}"].to_numpy() / PS_PER_US
    for p in PASSES:
        out[f"{p}_us"] = t[f"p_{p}"].to_numpy() / PS_PER_US
    out["flops"] = t["flops"].to_numpy()
    out["bytes_accessed"] = t["bytes"].to_numpy()
    out["ops"] = t["ops"].to_numpy().astype("int64")
    out["text"] = line_texts(node_paths) if by == "source" else None
    return _depth_first(out)


def _depth_first(nodes: pd.DataFrame) -> pd.DataFrame:
    """Parents before children; siblings by total time, largest first (then by name)."""
    rank = {p: (-t, n) for p, t, n in zip(nodes["path"], nodes["total_us"], nodes["name"])}
    keys = [tuple(rank[p[:k]] for k in range(1, len(p) + 1)) for p in nodes["path"]]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return nodes.iloc[order].reset_index(drop=True)


def _warnings(by: str, judged: bool, total_ps: float, unattributed_ps: float, unattributed_ops: int,
              ops: pd.DataFrame, attributed: np.ndarray) -> list[str]:
    out = []
    if not judged:
        out.append("no target chip: time by bound, gain and efficiency are unknown (give --target)")
    if unattributed_ops and total_ps > 0:
        what = "op_name metadata" if by == "scope" else "source file in their metadata"
        no_hlo = int((~ops["has_cost"].to_numpy(dtype=bool) & ~attributed).sum()) if "has_cost" in ops else 0
        why = f" ({no_hlo} of them match no HLO instruction)" if no_hlo else ""
        verb = "has" if unattributed_ops == 1 else "have"
        out.append(f"{counted(unattributed_ops, 'op')} ({100 * unattributed_ps / total_ps:.1f}% of op time) {verb} no {what}"
                   f"{why}: counted as unattributed_us")
    return out
