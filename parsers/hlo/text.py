"""Read HLO text as XLA prints and dumps it (CPU, GPU and TPU, before and after
optimizations) into :class:`~traceview.parsers.hlo.model.HloModule`.

The reader is line oriented: a computation starts with a header line ending in
``{``, holds one instruction per line and ends with a line starting ``}``.
An instruction's ``key=value`` attributes (JSON backend configs, metadata,
replica groups, ...) are cut at ``, key=`` with C-speed regexes and glued back
where a cut fell inside a string or brackets, so long lines cost little Python.

Every attribute keeps its raw text in ``Instruction.attributes``; a few are
also decoded into the dedicated fields (metadata, backend_config,
custom_call_target, fusion_kind, called_computations). Async ops printed with
XLA's syntax sugar (``reduce-scatter-start``) are rewritten into the
``async-start`` + wrapped computation form the protos hold.
"""

from __future__ import annotations

import re
from pathlib import Path

from traceview.errors import HloError
from traceview.parsers.hlo.attributes import called_from_attributes, unquote
from traceview.parsers.hlo.checks import check_module
from traceview.parsers.hlo.files import read_bytes
from traceview.parsers.hlo.model import Computation, HloModule, Instruction, source_name
from traceview.parsers.hlo.syntax import (
    ARRAY_RE,
    BARE_FLAG_RE,
    COMMENT_RE,
    balanced,
    match_close,
    parse_metadata,
    parse_shape,
    split_attributes,
    split_top_level,
    strip_comments,
)

__all__ = ["apply_stack_frames", "called_from_attributes", "desugar_async", "header_module_name",
           "looks_like_hlo_text", "parse_hlo_text", "read_hlo_text"]


# ---------------------------------------------------------------------------
# lines

_HEADER_RE = re.compile(r"^HloModule\s+([^\s,]+)\s*(?:,\s*(.*))?$")
_HEADER_NAME_RE = re.compile(r"HloModule\s+([^\s,]+)[\s,]")  # the name and what ends it (a cut-off name: no match)
_COMP_RE = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*(\(.*\))?\s*(?:->\s*(.*?))?\s*\{\s*$")
_INST_RE = re.compile(r"^\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_CUT_TOP_RE = re.compile(r"^(?:ENTRY\b|%|\d)")  # what a truncated top-level line can start with
_INST_START_RE = re.compile(r"^(?:ROOT\s+)?%?[^\s=(){}]+\s*=\s*[a-z(]")
_OPCODE_RE = re.compile(r"\s*([a-z][\w\-]*)\(")
_OPERAND_NAME_RE = re.compile(r"%?([^\s%]+)\s*$")
_SECTION_ENTRY_RE = re.compile(r'^(\d+)\s+(.*)$')
_CLOSE_THREAD_RE = re.compile(r'execution_thread="([^"]*)"')


def looks_like_hlo_text(head: str) -> bool:
    """True when text (its first few kB will do) starts, after comments, like an HLO module:
    an ``HloModule`` header, or a computation (``ENTRY`` or ``name (params) -> shape {``)."""
    for line in strip_comments(head).splitlines():
        s = line.strip()
        if not s:
            continue
        return s.startswith(("HloModule", "ENTRY")) or bool(_COMP_RE.match(s))
    return False


def header_module_name(head: str) -> str | None:
    """The module name an HLO text's ``HloModule`` header gives, from the text's first bytes (the parser
    takes the same name); None when the first line that is not blank or a ``//`` comment is not a whole
    header name."""
    for line in head.splitlines(keepends=True):
        s = line.lstrip()
        if not s.strip() or s.startswith("//"):
            continue
        m = _HEADER_NAME_RE.match(s)
        return m.group(1) if m else None
    return None


_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


class _Reader:
    """Parse state for one text; one instance per call of :func:`parse_hlo_text`."""

    def __init__(self, text: str, file: str | None):
        self.text = text
        self.file = file or "<hlo text>"
        self.module_name: str | None = None
        self.module_attrs: dict[str, str] = {}
        self.computations: dict[str, Computation] = {}
        self.entry: str | None = None
        self.warnings: list[str] = []
        self.sections: dict[str, dict[int, str]] = {s: {} for s in _SECTIONS}

    def error(self, line: int, what: str) -> HloError:
        return HloError(f"{self.file}:{line}: {what}")

    # -- top level ---------------------------------------------------------
    def run(self) -> HloModule:
        lines = self.text.splitlines()
        last = len(lines)
        while last > 0 and not lines[last - 1].strip():
            last -= 1
        self.last_line = last                # 1-based number of the last non-blank line
        self.comp: Computation | None = None
        self.comp_line = 0
        self.section: str | None = None
        self.pending: list[str] | None = None  # an instruction split over several lines
        self.pending_line = 0
        for number, raw in enumerate(lines, start=1):
            if self.comp is not None:
                self._body_line(raw.strip(), number)
            else:
                try:
                    self._top_line(raw.strip(), number)
                except HloError:
                    if number < self.last_line or self.module_name is None or not _CUT_TOP_RE.match(raw):
                        raise
                    self._dropped_line(number)  # a computation header or table row cut off
        if self.pending is not None:
            self._dropped_line(self.pending_line)
        if self.module_name is None:
            self._headerless()
        self._tuple_element_operands()
        self._check_operands()
        desugar_async(self.computations, self.warnings)
        if self.comp is not None:
            self.warnings.append(
                f"{self.file}: truncated: computation {self.comp.name!r} (line {self.comp_line}) is cut off "
                f"at line {len(lines)}; it holds only the {len(self.comp.instructions)} instructions read")
        if self.entry is None:
            self.warnings.append(
                f"{self.file}: no ENTRY computation (text truncated?); "
                f"{len(self.computations)} computations read, module-level totals are incomplete")
        module = HloModule(name=self.module_name, computations=self.computations, entry=self.entry,
                           file=self.file if self.file != "<hlo text>" else None,
                           warnings=self.warnings, attributes=self.module_attrs)
        self._stack_frames(module)
        return module

    def _headerless(self) -> None:
        """A module printed without its ``HloModule`` line, which XLA's parser accepts: it names the
        module ``module_<entry>`` and, when no computation says ENTRY, takes the last one."""
        if not self.computations:
            raise self.error(1, "no 'HloModule' header and no computation: not HLO text")
        if self.entry is None and self.comp is None:
            last = next(reversed(self.computations.values()))
            last.is_entry, self.entry = True, last.name
        self.module_name = f"module_{self.entry or next(iter(self.computations))}"

    def _top_line(self, s: str, number: int) -> None:
        """A line outside computations: header, stack-frame tables, computation headers."""
        if not s or s.startswith("//"):
            return
        if s.startswith("HloModule"):
            m = _HEADER_RE.match(s)
            if not m:
                raise self.error(number, "malformed HloModule header")
            if self.module_name is not None:
                raise self.error(number, "a second 'HloModule' header: give one module per text")
            self.module_name = m.group(1)
            for part in split_top_level(m.group(2) or ""):
                key, _, value = part.partition("=")
                self.module_attrs[key.strip()] = COMMENT_RE.sub("", value.strip()) if "/*" in value \
                    else value.strip()
            return
        if s in _SECTIONS:
            self.section = s
            return
        if self.section is not None and s[0].isdigit():
            m = _SECTION_ENTRY_RE.match(s)
            if not m:
                raise self.error(number, f"malformed {self.section} entry")
            self.sections[self.section][int(m.group(1))] = m.group(2)
            return
        self.section = None
        m = _COMP_RE.match(s)
        if not m:
            raise self.error(number, f"expected a computation header or 'HloModule', got {s[:60]!r}")
        name = m.group(2)
        if name in self.computations:
            raise self.error(number, f"computation {name!r} defined twice")
        self.comp = Computation(name=name, instructions=[], is_entry=bool(m.group(1)))
        self.comp_line = number
        self.computations[name] = self.comp
        if self.comp.is_entry:
            self.entry = name

    def _body_line(self, s: str, number: int) -> None:
        """A line inside a computation: an instruction (maybe continued) or the closing brace."""
        comp = self.comp
        if self.pending is not None:
            if _INST_START_RE.match(s):  # XLA never splits an instruction before a new one
                raise self.error(self.pending_line, "unbalanced brackets or quotes in this instruction")
            self.pending.append(s)
            joined = " ".join(self.pending)
            if balanced(joined):
                self.pending = None
                self._instruction(comp, joined, self.pending_line, truncated_ok=False)
            return
        if not s:
            return
        if s[0] == "}":
            assert comp is not None  # _body_line runs only inside a computation
            m = _CLOSE_THREAD_RE.search(s)
            if m:
                comp.execution_thread = m.group(1)
            if comp.root is None and comp.instructions:  # XLA's rule when ROOT is not marked
                comp.root = comp.instructions[-1].name
            self.comp = None
            return
        if not balanced(s):
            if number >= self.last_line:
                self._dropped_line(number)
            else:
                self.pending, self.pending_line = [s], number
            return
        self._instruction(comp, s, number, truncated_ok=number >= self.last_line)

    def _tuple_element_operands(self) -> None:
        """Current XLA prints a use of a tuple's element as ``%name#index`` (no get-tuple-element line);
        the proto form still has the get-tuple-element. Each such operand becomes one, named as printed and
        placed after the tuple, so the model (and every cost) is the same from either form."""
        for comp in self.computations.values():
            defined = {inst.name: pos for pos, inst in enumerate(comp.instructions)}
            added: dict[str, tuple[int, Instruction]] = {}
            for inst in comp.instructions:
                for op in inst.operands:
                    base, sep, index = op.rpartition("#")
                    if not sep or op in defined or op in added or base not in defined or not index.isdigit():
                        continue
                    tuple_inst = comp.instructions[defined[base]]
                    elements = tuple_inst.shape.tuple_shapes
                    if len(index) > 9 or int(index) >= len(elements):
                        raise self.error(inst.line or 0, f"instruction {inst.name!r} uses {op!r}: {base!r} has "
                                         f"{len(elements)} tuple element(s)")
                    added[op] = (defined[base], Instruction(
                        name=op, opcode="get-tuple-element", shape=elements[int(index)], operands=[base],
                        attributes={"index": index}, line=inst.line))
            for pos, gte in sorted(added.values(), key=lambda item: item[0], reverse=True):
                comp.instructions.insert(pos + 1, gte)

    def _check_operands(self) -> None:
        """Every operand must name an instruction of its computation."""
        for comp in self.computations.values():
            names = {inst.name for inst in comp.instructions}
            for inst in comp.instructions:
                for op in inst.operands:
                    if op not in names:
                        raise self.error(inst.line or 0, f"instruction {inst.name!r} uses {op!r}, which "
                                         f"computation {comp.name!r} does not define")

    def _dropped_line(self, line: int) -> None:
        self.warnings.append(f"{self.file}:{line}: the last line is cut off; dropped it")

    # -- instructions ------------------------------------------------------
    def _instruction(self, comp: Computation, s: str, line: int, truncated_ok: bool) -> None:
        try:
            inst = self._parse_instruction(s, line)
        except HloError:
            if truncated_ok:
                self._dropped_line(line)
                return
            raise
        comp.instructions.append(inst)
        if s.startswith("ROOT"):
            comp.root = inst.name

    def _parse_instruction(self, s: str, line: int) -> Instruction:
        m = _INST_RE.match(s)
        if not m:
            raise self.error(line, f"expected an instruction 'name = shape opcode(...)', got {s[:60]!r}")
        name, rest = m.group(2), m.group(3)
        # shape
        try:
            if rest.startswith("("):
                end = match_close(rest, 0)
                if end < 0:
                    raise ValueError("unbalanced tuple shape")
                while rest.startswith("{", end):  # tuple layout
                    end = rest.index("}", end) + 1
                shape_text = rest[:end]
            else:
                sm = ARRAY_RE.match(rest)
                if not sm:
                    raise ValueError("no shape")
                end = sm.end()
                shape_text = rest[:end]
            shape = parse_shape(shape_text.strip())
        except ValueError as exc:
            raise self.error(line, f"instruction {name!r}: bad shape ({exc})") from None
        om = _OPCODE_RE.match(rest, end)
        if not om:
            raise self.error(line, f"instruction {name!r}: expected 'opcode(' after the shape")
        opcode = om.group(1)
        open_pos = om.end() - 1
        close = match_close(rest, open_pos)
        if close < 0:
            raise self.error(line, f"instruction {name!r}: unbalanced operand list")
        operand_text = rest[open_pos + 1:close - 1]
        attributes: dict[str, str] = {}
        operands: list[str] = []
        if opcode == "parameter":
            attributes["parameter_number"] = operand_text.strip()
        elif opcode == "constant":
            attributes["literal"] = operand_text.strip()
        elif operand_text.strip():
            if "/*" in operand_text:
                operand_text = COMMENT_RE.sub("", operand_text)
            parts = split_top_level(operand_text) if "[" in operand_text else operand_text.split(",")
            for p in parts:
                pm = _OPERAND_NAME_RE.search(p)
                if not pm:
                    raise self.error(line, f"instruction {name!r}: bad operand {p!r}")
                operands.append(pm.group(1))
        inst = Instruction(name=name, opcode=opcode, shape=shape, operands=operands,
                           attributes=attributes, line=line)
        tail = rest[close:].strip()
        if tail:
            if tail[0] != ",":
                raise self.error(line, f"instruction {name!r}: expected ',' after operands, got {tail[:30]!r}")
            for part in split_attributes(tail[1:].lstrip()):
                key, eq, value = part.partition("=")
                if not eq and BARE_FLAG_RE.match(part):  # a flag XLA may add one day: keep it
                    attributes[part] = ""
                    continue
                if not eq:
                    raise self.error(line, f"instruction {name!r}: attribute without '=': {part[:40]!r}")
                value = value.strip()
                if "/*" in value:  # /*index=5*/ markers XLA puts in long lists
                    value = COMMENT_RE.sub("", value)
                attributes[key.strip()] = value
            self._decode_attributes(inst)
        return inst

    @staticmethod
    def _decode_attributes(inst: Instruction) -> None:
        attrs = inst.attributes
        if "metadata" in attrs:
            inst.metadata = parse_metadata(attrs["metadata"])
        if "backend_config" in attrs:
            inst.backend_config = unquote(attrs["backend_config"])
        if "custom_call_target" in attrs:
            inst.custom_call_target = unquote(attrs["custom_call_target"])
        if inst.opcode == "fusion" and "kind" in attrs:
            inst.fusion_kind = attrs["kind"]
        inst.called_computations = called_from_attributes(attrs)

    # -- stack frames --------------------------------------------------------
    def _stack_frames(self, module: HloModule) -> None:
        sec = self.sections
        if not sec["StackFrames"]:
            module.source_files = [source_name(unquote(v)) for _, v in sorted(sec["FileNames"].items())]
            return
        files = {k: source_name(unquote(v)) for k, v in sec["FileNames"].items()}
        funcs = {k: source_name(unquote(v)) for k, v in sec["FunctionNames"].items()}
        locs = {k: parse_metadata(v) for k, v in sec["FileLocations"].items()}
        module.source_files = [files[k] for k in sorted(files)]
        bad = 0
        for fid, text in sec["StackFrames"].items():
            try:
                loc = locs.get(int(parse_metadata(text).get("file_location_id", 0)))
                if loc is None:
                    continue
                module.stack_frames[fid] = (files.get(int(loc.get("file_name_id", 0)), "?"),
                                            int(loc.get("line", 0)),
                                            funcs.get(int(loc.get("function_name_id", 0)), "?"))
            except ValueError:  # an id that is not an integer
                bad += 1
        if bad:
            self.warnings.append(f"{self.file}: {bad} stack frame(s) with ids that are not integers; skipped")
        apply_stack_frames(module)


# Opcodes XLA has natively; any other "<op>-start/-update/-done" is printing sugar for an
# async-start/-update/-done that wraps <op> (HloPrintOptions.syntax_sugar_async_ops).
_NATIVE_ASYNC = frozenset({
    "all-gather-start", "all-gather-done", "all-reduce-start", "all-reduce-done",
    "collective-permute-start", "collective-permute-done", "copy-start", "copy-done",
    "async-start", "async-update", "async-done", "send-done", "recv-done"})
_SUGAR_RE = re.compile(r"^(?P<op>[a-z][\w\-]*?)-(?P<phase>start|update|done)$")
# attributes that belong to the async wrapper itself, not to the op it wraps
_ASYNC_OWN = ("backend_config", "async_execution_thread", "metadata", "frontend_attributes",
              "control-predecessors", "sharding")


def desugar_async(computations: dict[str, Computation], warnings: list[str]) -> None:
    """Rewrite ``reduce-scatter-start(...)``-style sugar into the canonical form the protos hold.

    Newer XLA prints an async-start wrapping one op as ``<op>-start`` with the
    op's attributes inline and no wrapped computation. Here it becomes an
    ``async-start`` calling a computation ``<name>.async_wrapped`` (parameters +
    the op) and its ``-update``/``-done`` halves become ``async-update``/``async-done``,
    so the cost model sees one form whatever printed the text.
    """
    for comp in list(computations.values()):
        for inst in comp.instructions:
            if inst.opcode in _NATIVE_ASYNC:
                continue
            m = _SUGAR_RE.match(inst.opcode)
            if not m:
                continue
            if m.group("phase") != "start":
                inst.opcode = "async-" + m.group("phase")
                continue
            shape = inst.shape
            if not (shape.is_tuple and len(shape.tuple_shapes) >= 2 and shape.tuple_shapes[0].is_tuple
                    and len(shape.tuple_shapes[0].tuple_shapes) == len(inst.operands)):
                warnings.append(f"line {inst.line}: {inst.opcode} {inst.name!r} has no async shape "
                                f"((operands), result, ...); left as printed")
                continue
            wrapped_name = f"{inst.name}.async_wrapped"
            params = [Instruction(name=f"{wrapped_name}.param_{i}", opcode="parameter", shape=s, operands=[],
                                  attributes={"parameter_number": str(i)}, line=inst.line)
                      for i, s in enumerate(shape.tuple_shapes[0].tuple_shapes)]
            op_attrs = {k: v for k, v in inst.attributes.items() if k not in _ASYNC_OWN}
            root = Instruction(name=f"{inst.name}.wrapped", opcode=m.group("op"), shape=shape.tuple_shapes[1],
                               operands=[p.name for p in params], attributes=op_attrs,
                               called_computations=list(inst.called_computations),
                               metadata=dict(inst.metadata), line=inst.line)
            thread = inst.attributes.get("async_execution_thread")
            computations[wrapped_name] = Computation(
                name=wrapped_name, instructions=[*params, root], root=root.name,
                execution_thread=thread.strip('"') if thread else None)
            inst.opcode = "async-start"
            inst.attributes = {k: v for k, v in inst.attributes.items() if k in _ASYNC_OWN}
            inst.attributes["calls"] = "%" + wrapped_name
            inst.called_computations = [wrapped_name]


def apply_stack_frames(module: HloModule) -> None:
    """Fill metadata source_file/source_line from ``stack_frame_id`` where absent, and source_function
    (the frame's function) where the frame is the metadata's own file and line."""
    frames = module.stack_frames
    if not frames:
        return
    for comp in module.computations.values():
        for inst in comp.instructions:
            md = inst.metadata
            sid = md.get("stack_frame_id")
            if not sid:
                continue
            try:
                frame = frames.get(int(sid))
            except ValueError:  # not an integer id: no frame
                continue
            if frame is None:
                continue
            if "source_file" not in md:
                md["source_file"] = frame[0]
                md["source_line"] = str(frame[1])
            if frame[2] and frame[2] != "?" and md["source_file"] == frame[0] and md.get("source_line") == str(frame[1]):
                md["source_function"] = frame[2]




# ---------------------------------------------------------------------------
# public API

def parse_hlo_text(text: str, file: str | None = None) -> HloModule:
    """Parse one HLO module's text. ``file`` names it in errors and warnings.

    Truncated text parses what is there and says what is missing in
    ``HloModule.warnings``; malformed text raises :class:`HloError` naming the
    file and line.
    """
    where = file or "<hlo text>"
    try:
        module = _Reader(strip_comments(text), file).run()
    except (ValueError, KeyError, IndexError, OverflowError, TypeError, RecursionError) as exc:
        # The reader handles every form XLA prints; anything else that trips it is malformed input.
        raise HloError(f"{where}: malformed HLO text ({type(exc).__name__}: {str(exc)[:120]})") from None
    check_module(module, where)
    return module


def read_hlo_text(path: str | Path) -> HloModule:
    """Read an HLO text file (``*.txt``, optionally ``.xz``/``.gz`` compressed)."""
    p = Path(path)
    data = read_bytes(p)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HloError(f"{p}: not UTF-8 text (byte {exc.start}); is this a binary HLO proto?") from None
    return parse_hlo_text(text, str(p))
