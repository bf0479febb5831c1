"""``traceview.load(path) -> Analysis``: a trace read, costed and judged against a chip, and its views.

The one place outside the pipeline modules that runs the pipeline (``trace.read`` ->
``analysis.build.build_analysis``); the CLI, the dashboard, the regression stage and the tests call
:func:`load`. :class:`Analysis` only delegates: each table and view is built by its own package when first
asked for, and kept, so asking for the op table reads no allocator event and diagnoses no mesh. Tables are
in the JSON contract's fields and units (``analysis.public``: microseconds, bytes, FLOPs, per second);
views are typed reports; JSON is written by ``render`` (:meth:`Analysis.to_json`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from traceview.analysis.build import PipelineResult, apply_target, build_analysis
from traceview.analysis.public import device_rows, public_ops
from traceview.config.values import flag, optional_path, path_like
from traceview.errors import UserError
from traceview.hardware.chips import Chip
from traceview.hardware.database import get_chip, load_hardware
from traceview.parsers.hlo.dump import check_stage
from traceview.trace.progress import progress_bar
from traceview.trace.read import ReadOptions, load_profile
from traceview.units import PS_PER_US

if TYPE_CHECKING:
    from traceview.advice.view import AdviceReport
    from traceview.api.hlo import HloReport
    from traceview.inference.programs import Program
    from traceview.inference.view import InferenceReport
    from traceview.memory.view import MemoryReport
    from traceview.parallelism.report import Parallelism
    from traceview.scopes.tree import ScopeTree
    from traceview.whatif.report import WhatIf

__all__ = ["Analysis", "Summary", "load"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Summary:
    """Headline numbers of one analysis: the ``summary`` object of ``traceview analyze --format json``
    (less its ``steps`` list, which is :attr:`Analysis.steps`). docs/api.md defines every field.

    Times in microseconds; None where unknown (the roofline fields when no
    target chip is known), with ``*_reason`` saying why. ``devices`` lists the
    active devices' busy/idle/span times; ``time_by_bound_us`` maps each
    bound (compute, memory, communication, unknown, idle) to device time.
    """

    device_time_us: float | None = None
    span_us: float | None = None
    idle_us: float | None = None
    total_span_us: float | None = None
    active_devices: int | None = None
    op_time_us: float | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    inactive_devices: list[Any] = field(default_factory=list)
    time_by_bound_us: dict[str, float | None] | None = None
    mfu: float | None = None
    mfu_reason: str | None = None
    mfu_dtype: str | None = None
    mfu_peak_dtype: str | None = None
    mfu_peak_flops: float | None = None
    flops: float | None = None
    flops_reason: str | None = None
    achieved_flops: float | None = None
    bytes_accessed: float | None = None
    efficiency: float | None = None
    efficiency_reason: str | None = None
    efficiency_definition: str | None = None
    # what the chip the trace ran on was seen to reach ({value, op, share_of_peak, peak_dtype}; None when no op
    # qualifies or the target is another chip): the fastest compute- and memory-bound op of the trace
    seen_flops: dict[str, Any] | None = None
    seen_bandwidth: dict[str, Any] | None = None
    projected: bool | None = None
    projection_model: str | None = None
    roofline_time_us: float | None = None
    projected_time_us: float | None = None
    gain_definition: str | None = None
    top_scopes: list[dict[str, Any]] | None = None     # docs/scopes.md: the scopes with most gain of their own
    # the advice view (docs/advice.md): idle time by cause, per device and per step, and stragglers
    idle_causes: list[dict[str, Any]] = field(default_factory=list)
    idle_causes_reason: str | None = None
    idle_causes_by_device: list[dict[str, Any]] = field(default_factory=list)
    idle_causes_by_step: list[dict[str, Any]] = field(default_factory=list)
    stragglers: dict[str, Any] | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Summary:
        """From the JSON ``summary`` object; fields it does not hold stay None."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})


class Analysis:
    """One analyzed trace: its ops, executions, steps and devices as DataFrames, judged against ``target``,
    and its views (:meth:`scopes`, :meth:`memory`, :meth:`parallelism`, :meth:`inference`, :meth:`advice`,
    :meth:`whatif`, :meth:`hlo`) as typed reports.

    Built by :func:`traceview.load`. Each table and view is computed on first access and kept, and each
    builds only what it reads: the op table neither reads allocator events nor diagnoses the mesh.
    :meth:`retarget` judges the same trace against another chip without reading it again. ``pipeline``
    holds the pipeline's own tables (picoseconds, internal column names) for the renderers and the dashboard.
    """

    def __init__(self, pipeline: PipelineResult, hardware_file: str | Path | None = None,
                 hlo: str | Path | None = None):
        self.pipeline = pipeline
        self.hardware_file = hardware_file
        self.hlo_path = hlo
        self._memory: MemoryReport | None = None
        self._parallelism: Parallelism | None = None
        self._inference: InferenceReport | None = None
        self._scopes: dict[str, ScopeTree] = {}
        self._advice: AdviceReport | None = None

    def __repr__(self) -> str:
        source = self.pipeline.profile.source
        target = self.target.name if self.target else None
        return f"<traceview.Analysis {source.run or source.path!s}: {len(self.pipeline.ops)} ops, target {target}>"

    def to_json(self) -> dict[str, Any]:
        """Exactly what ``traceview analyze PATH --format json`` prints (a fresh record on each call): the
        pipeline's tables and the views' fields (advice, scopes, serving), written by ``render``."""
        from traceview.render.analyze_views import analyze_json

        return analyze_json(self.pipeline, self.advice(), self.scope_tree(), self.serving())

    # ------------------------------------------------------------ tables: each built on first use, then kept

    @cached_property
    def ops(self) -> pd.DataFrame:
        """One row per (program, op) (per device too with ``per_device=True``): the JSON ``ops``.

        Same fields and units as ``analyze --format json`` (docs/api.md lists
        every column): times ``*_us`` are totals over the op's occurrences in
        microseconds, ``flops``/``bytes_accessed``/``collective_bytes`` totals,
        ``bound`` one of compute/memory/communication/unknown (None without a
        target). Sorted by ``gain_us`` (device time saved at the roofline),
        largest first; ``a.ops.sort_values("gap_us", ascending=False)`` orders by gap.
        """
        return public_ops(self.pipeline.ops)

    @cached_property
    def op_executions(self) -> pd.DataFrame:
        """One row per op execution on a device, as the trace recorded it.

        Columns: host, device, line, module, program_id, name, category,
        start_us (session clock), duration_us, self_time_us (duration minus
        nested child ops), step (-1 outside every step), trace_flops and
        trace_bytes (what a TPU trace reports itself, NaN otherwise).
        """
        raw = self.pipeline.profile.op_executions()   # read again when loaded without them
        frame = raw.rename(columns={"op": "name", "self_ps": "self_time_ps"})
        return _ps_to_us(frame)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per step: step, start_us, time_us (first start to last end over devices),
        device_mean_us, devices, and with a target ``<bound>_us``: device self time per bound."""
        return _ps_to_us(self.pipeline.steps)

    @cached_property
    def devices(self) -> pd.DataFrame:
        """One row per device plane: the JSON ``devices`` (id, kind, name, figures the trace reports)."""
        return pd.DataFrame.from_records(device_rows(self.pipeline.profile.devices))

    @cached_property
    def summary(self) -> Summary:
        """Headline numbers (:class:`Summary`): the JSON ``summary``, with the views' fields in it."""
        from traceview.render.analyze_views import analyze_summary

        return Summary.from_record(analyze_summary(self.pipeline, self.advice(), self.scope_tree()))

    @property
    def warnings(self) -> list[str]:
        """What could not be read, costed or judged, one sentence each."""
        return list(self.pipeline.warnings)

    @property
    def target(self) -> Chip | None:
        """The chip the ops are judged against; None when none was given or detected."""
        return self.pipeline.judged.chip if self.pipeline.judged is not None else None

    def retarget(self, chip: str | Chip) -> Analysis:
        """The same trace judged against ``chip`` (a name or alias from :func:`traceview.chips`, or a Chip).

        Nothing is read again; this analysis is left as it was.
        """
        chosen = resolve_chip(chip, self.hardware_file)
        return Analysis(apply_target(self.pipeline, chosen, detected=False), self.hardware_file, self.hlo_path)

    # ------------------------------------------------------------ views: each built on first use, then kept

    def memory(self) -> MemoryReport:
        """Peak memory: per allocator from the trace's allocator events (what is held at the peak), per HLO
        module from its buffer assignment, headroom on the target (what ``traceview memory --format json``
        prints: ``traceview.render.memory.memory_json``)."""
        if self._memory is None:
            from traceview.memory.view import memory_from_analysis

            self._memory = memory_from_analysis(self.pipeline, self.hardware_file)
        return self._memory

    def parallelism(self) -> Parallelism:
        """The device mesh, each axis' collectives and exposed time, its role and the book's verdict (what
        ``traceview parallelism --format json`` prints: ``traceview.render.parallelism.parallelism_json``)."""
        if self._parallelism is None:
            from traceview.parallelism.diagnose import from_analysis

            self._parallelism = from_analysis(self.pipeline, self.hlo_path)
        return self._parallelism

    def mesh(self) -> Parallelism | None:
        """The parallelism report ``analyze`` summarises in one line (``traceview.render.analyze_views.mesh_line``);
        None for a trace with no collectives, unless it runs a program per stage of a pipeline on its devices
        (an MPMD pipeline, measured in the trace). A trace with neither is not diagnosed."""
        from traceview.parallelism.summary import summarised_mesh

        return summarised_mesh(self.pipeline, self.parallelism)

    def whatif(self, meshes: Sequence[dict[str, int] | str] | dict[str, int] | str | None = None,
               batches: Sequence[str | float] | str | float | None = None, chips: int | None = None,
               target: str | Chip | None = None, microbatches: int | None = None) -> WhatIf:
        """The step time, MFU and memory per chip of other meshes (role -> ways), batches (tokens, or "x2"),
        chip counts and a target chip, projected from this trace's measured step (docs/whatif.md; what
        ``traceview whatif --format json`` prints: ``traceview.render.whatif.whatif_json``).

        A mesh is ``{"fsdp": 4, "tensor": 2}`` or the command line's ``"fsdp=4,tensor=2"``; one mesh or batch
        may stand alone (``batches=2560``). Every argument is checked before the views are built: a wrong one
        is a UserError naming it."""
        from traceview.whatif.config import Request, parse_batches, parse_chips, parse_meshes, parse_microbatches
        from traceview.whatif.view import whatif_report

        request = Request(parse_meshes(meshes), parse_batches(batches), parse_chips(chips),
                          None if target is None else resolve_chip(target, self.hardware_file),
                          parse_microbatches(microbatches))
        return whatif_report(self.pipeline, self.parallelism(), self.memory(), request)

    def inference(self) -> InferenceReport:
        """The serving phases (prefill, decode) against the book's inference roofline, the critical batch and
        the KV-cache budget on the target (what ``traceview inference --format json`` prints:
        ``traceview.render.inference.inference_json``; docs/inference.md)."""
        if self._inference is None:
            from traceview.inference.view import inference_from_analysis

            self._inference = inference_from_analysis(self.pipeline, self.pipeline.profile.op_executions(),
                                                      self._programs)
        return self._inference

    def serving(self) -> InferenceReport | None:
        """:meth:`inference` when a program with a KV cache ran (what ``analyze`` reports and advises on),
        else None."""
        return self.inference() if self._serving_found else None

    @cached_property
    def _serving_found(self) -> bool:
        from traceview.inference.loops import serves

        return any(serves(m, p) for m, p in zip(self.pipeline.hlo.ran, self._programs))

    @cached_property
    def _programs(self) -> list[Program]:
        """The modules that ran (``pipeline.hlo.ran``), read as serving programs (caches, token inputs)."""
        from traceview.inference.programs import read_program

        return [read_program(m) for m in self.pipeline.hlo.ran]

    def scope_tree(self, by: str = "scope") -> ScopeTree:
        """The scope (``by="scope"``) or source-line (``by="source"``) tree with its totals and warnings
        (what ``traceview scopes --format json`` prints: ``traceview.render.scopes.scopes_json``)."""
        from traceview.scopes.tree import BY

        if not isinstance(by, str) or by not in BY:   # checked here: the cache below is keyed by it
            raise UserError(f"by={by!r}: expected one of {', '.join(map(repr, BY))}")
        if by not in self._scopes:
            from traceview.scopes.tree import build_scopes

            self._scopes[by] = build_scopes(self.pipeline, by)
        return self._scopes[by]

    def scopes(self, by: str = "scope") -> pd.DataFrame:
        """One row per node of the tree by named scope (``by="scope"``) or by source file and line
        (``"source"``): ``path`` (a tuple: program, then scopes), depth, name, self_us, total_us, gain_us,
        self_gain_us, efficiency, ``<bound>_us``, ``forward_us``/``backward_us``/``other_us``, flops,
        bytes_accessed, ops, text (the source line's text, by source). docs/scopes.md defines them."""
        return self.scope_tree(by).nodes.copy()

    def advice(self) -> AdviceReport:
        """Why the devices were idle (causes per device and per step), stragglers, and one list of what to
        fix first ranked by estimated saving in wall time (ops, mesh axes, idle causes, memory, scopes,
        serving): ``items[i]`` is an ``advice.findings.Advice``; ``traceview.render.advice`` writes the JSON.
        The other views are built only when a provider reads them."""
        if self._advice is None:
            from traceview.advice.findings import Views
            from traceview.advice.view import advice_report

            self._advice = advice_report(self.pipeline, Views(parallelism=self.mesh, memory=self.memory,
                                                              scopes=self.scope_tree, serving=self.serving))
        return self._advice

    def hlo(self) -> HloReport:
        """The cost model of the HLO modules this trace ran (FLOPs, bytes, collectives per instruction)."""
        from traceview.api.hlo import costed_report

        return costed_report(self.pipeline.hlo.every, [])


def load(path: str | Path, *, run: str | None = None, target: str | Chip | None = None,
         hlo: str | Path | None = None, stage: str = "after", hardware_file: str | Path | None = None,
         progress: bool | Progress = False, per_device: bool = False,
         read_options: ReadOptions | None = None) -> Analysis:
    """Read a trace and analyze it.

    ``path``: a log dir (``plugins/profile/<run>/`` below it), a run dir or
    one ``.xplane.pb`` file, as the CLI takes it; ``run``: which run of a log
    dir (default the newest). ``target``: the chip to judge against, a name
    or alias (``traceview.chips()``) or a :class:`Chip` (default: the chip
    the trace ran on, when it can be told). ``hlo``: an XLA dump folder or
    HLO file with the modules (default: the trace's own HLO, or an ``hlo/``
    folder beside it); ``stage``: "after" or "before" optimizations.
    ``hardware_file``: a JSON/TOML file adding or overriding chips.
    ``progress``: True draws a bar on a terminal's stderr; a callable gets
    ``(done, total)`` files. ``per_device``: one ops row per (device, op).
    ``read_options``: how host files are read (``traceview.trace.read.ReadOptions``:
    table cache, parallel jobs, a Dask scheduler; default: the environment).

    Raises :class:`traceview.UserError` (or its subclasses) for bad input: every argument is checked
    before the trace is read (a wrong stage or chip name costs no read).
    """
    path = path_like(path, "path")
    hlo, hardware_file = optional_path(hlo, "hlo"), optional_path(hardware_file, "hardware_file")
    check_stage(stage)
    per_device = flag(per_device, "per_device")
    _check_reading(progress, read_options)
    # "" means no target, as `--target ""` does: the chip is detected
    chip = None if target is None or (isinstance(target, str) and not target) else resolve_chip(target, hardware_file)
    if progress is True:
        with progress_bar("reading trace") as bar:
            profile = load_profile(path, run=run, progress=bar, options=read_options)
    else:
        profile = load_profile(path, run=run, progress=progress or None, options=read_options)
    pipeline = build_analysis(profile, hardware_file=hardware_file, hlo_path=hlo, stage=stage,
                              per_device=per_device, target_chip=chip)
    return Analysis(pipeline, hardware_file, hlo)


def resolve_chip(chip: str | Chip, hardware_file: str | Path | None) -> Chip:
    """``chip`` itself, or the chip its name or alias means in the database (with ``hardware_file``);
    a UserError for an unknown name or a value that is no name (``retarget(123)``)."""
    return chip if isinstance(chip, Chip) else get_chip(chip, load_hardware(hardware_file))


def _check_reading(progress: object, read_options: object) -> None:
    """``progress`` is a flag or a callable, ``read_options`` a ReadOptions: anything else would fail only once
    the first file was read, as a TypeError from the reading pool."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise UserError(f"progress={progress!r}: expected True, False or a callable taking (done, total)")
    if read_options is not None and not isinstance(read_options, ReadOptions):
        raise UserError(f"read_options={read_options!r}: expected a traceview.trace.read.ReadOptions")


def _ps_to_us(frame: pd.DataFrame) -> pd.DataFrame:
    """``*_ps`` columns to ``*_us`` (floats), others as they are."""
    out = frame.copy()
    for column in [c for c in out.columns if c.endswith("_ps")]:
        out[column] = pd.to_numeric(out[column], errors="coerce") / PS_PER_US
    return out.rename(columns={c: c[:-3] + "_us" for c in out.columns if c.endswith("_ps")})
