"""The HLO data model shared by the text and proto readers and the cost model.

Both readers produce these objects, so everything downstream (cost model,
joins, reports) is indifferent to where a module came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.parsers.hlo.attributes import Attributes, input_output_alias, integer_scalar_type

# Characters of a source file or function name kept from a module's stack-frame tables: every instruction of
# a frame shares its name, so one hostile 2 M-character name would be printed once per instruction.
MAX_SOURCE_NAME = 1000


def source_name(name: str) -> str:
    """A stack-frame table's file or function name, its middle cut (with an ellipsis) past MAX_SOURCE_NAME."""
    if len(name) <= MAX_SOURCE_NAME:
        return name
    half = MAX_SOURCE_NAME // 2
    return name[:half] + "\u2026" + name[-half:]


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array ``element_type[dims]`` or a tuple of shapes.

    ``element_type`` uses XLA's lower-case names (f32, bf16, f8e4m3fn, s8,
    pred, token, tuple, ...). ``layout`` is the raw layout text, e.g.
    ``{1,0:T(8,128)(2,1)}``, or None.
    """

    element_type: str
    dims: tuple[int, ...] = ()
    tuple_shapes: tuple[Shape, ...] = ()
    layout: str | None = None
    dynamic: tuple[bool, ...] = ()    # per dim: True for a bounded-dynamic dim (``<=N``, dims holds N)

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"


@dataclass
class Instruction:
    """One HLO instruction: name, opcode, shape, operands, attributes and metadata as XLA prints them."""

    name: str
    opcode: str                       # "dot", "fusion", "all-reduce-start", "custom-call", ...
    shape: Shape
    operands: list[str]               # operand instruction names, in order
    attributes: dict[str, str] = field(default_factory=dict)  # raw attribute text by key
    called_computations: list[str] = field(default_factory=list)
    # op_type, op_name, source_file, source_line; source_function from the module's stack frames
    metadata: dict[str, str] = field(default_factory=dict)
    backend_config: str | None = None  # raw (usually JSON) text
    custom_call_target: str | None = None
    fusion_kind: str | None = None     # kLoop, kInput, kOutput, kCustom
    id: int | None = None              # unique id in the proto form (may exceed 2**31)
    line: int | None = None            # line in the HLO text file, for messages
    _typed: Attributes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def typed(self) -> Attributes:
        """The attributes as typed values, each decoded on first use (read once the instruction is built)."""
        if self._typed is None:
            self._typed = self.text_attributes()
        return self._typed

    @typed.setter
    def typed(self, record: Attributes) -> None:
        """Set by a reader that decodes the typed values itself (the proto reader, from the proto's fields)."""
        self._typed = record

    def text_attributes(self) -> Attributes:
        """A fresh record decoded from the attribute text (with what it needs of the opcode and shape)."""
        shape = self.shape
        return Attributes(self.attributes, self.backend_config,
                          integer_scalar_type(self.opcode, shape.element_type, shape.dims))


@dataclass
class Computation:
    """One HLO computation: its instructions in order and its root."""

    name: str
    instructions: list[Instruction]
    root: str | None = None            # name of the ROOT instruction
    is_entry: bool = False
    execution_thread: str | None = None

    def by_name(self) -> dict[str, Instruction]:
        return {inst.name: inst for inst in self.instructions}


@dataclass
class HloModule:
    """One HLO module: its computations (the entry among them), attributes, file and dump stage."""

    name: str
    computations: dict[str, Computation]   # by name, in file order
    entry: str | None                        # name of the ENTRY computation
    file: str | None = None
    stage: str | None = None                 # "before" / "after" optimizations, when known
    program_id: int | None = None
    source_files: list[str] = field(default_factory=list)    # FileNames table
    stack_frames: dict[int, tuple[str, int, str]] = field(default_factory=dict)  # id -> (file, line, function)
    warnings: list[str] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)  # header attributes, raw text by key
    module_id: int | None = None             # dump file number (module_0016.* -> 16), or proto id
    _aliases: dict[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def aliases(self) -> dict[int, int]:
        """The donated outputs (``input_output_alias``): top-level output index -> the parameter number whose
        buffer it reuses; from the header text on first use, unless the reader set them."""
        if self._aliases is None:
            self._aliases = input_output_alias(self.attributes.get("input_output_alias"))
        return self._aliases

    @aliases.setter
    def aliases(self, value: dict[int, int]) -> None:
        """Set by a reader that decodes them itself (the proto reader, from the alias entries)."""
        self._aliases = value

    def entry_computation(self) -> Computation | None:
        return self.computations.get(self.entry) if self.entry else None
