"""Candidate configurations: a mesh (role -> ways), a global batch, a chip; parsed from the command line or
enumerated (every factorisation of a chip count over the roles a program uses)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from traceview.config.values import as_float, listed, whole_number
from traceview.errors import UserError
from traceview.hardware.chips import Chip

ROLES = ("data", "fsdp", "tensor", "context", "pipeline", "expert")
MAX_CHIPS = 1 << 20
MAX_CONFIGS = 1000     # factorisations one --chips may list
MAX_MICROBATCHES = 1 << 20


@dataclass(frozen=True)
class Config:
    """One configuration to project: the mesh by role, the global batch (tokens), the chip."""
    mesh: dict[str, int]
    batch: float
    chip: Chip | None
    label: str = ""                      # how it was asked for ("today", "--mesh", "factorisation of 8", ...)
    microbatches: int | None = None      # a pipeline's m (None: the trace's, else the book's m = 4p)

    @property
    def chips(self) -> int:
        return math.prod(self.mesh.values())

    def key(self) -> tuple:
        return (tuple(sorted((r, s) for r, s in self.mesh.items() if s > 1)), round(self.batch, 6),
                self.chip.name if self.chip else None)


def parse_mesh(text: str) -> dict[str, int]:
    """``data=8,fsdp=4,tensor=2`` -> {"data": 8, "fsdp": 4, "tensor": 2}; roles are the parallelism view's."""
    pairs: list[tuple[str, object]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        role, sep, size = part.partition("=")
        if not sep:
            raise UserError(f"--mesh {text!r}: expected ROLE=N,... with ROLE one of {', '.join(ROLES)}")
        pairs.append((role.strip(), size))
    if not pairs:
        raise UserError(f"--mesh {text!r}: no ROLE=N given")
    return _mesh(pairs, f"--mesh {text!r}")


def mesh_of(value: object) -> dict[str, int]:
    """A mesh as Python gives it: ``{"fsdp": 4, "tensor": 2}``, or the command line's ``"fsdp=4,tensor=2"``.
    ``{}`` is one chip (no axis split), as a capture on one chip records its mesh."""
    if isinstance(value, str):
        return parse_mesh(value)
    if not isinstance(value, Mapping):
        raise UserError(f"mesh {value!r}: expected {{ROLE: N, ...}} or 'ROLE=N,...' with ROLE one of "
                        f"{', '.join(ROLES)}")
    return _mesh(list(value.items()), f"mesh {value!r}")


def _mesh(pairs: Sequence[tuple[object, object]], what: str) -> dict[str, int]:
    """The mesh of (role, ways) pairs, a role given twice multiplied out; ``what`` names it in errors."""
    mesh: dict[str, int] = {}
    for role, size in pairs:
        if not isinstance(role, str) or role not in ROLES:
            raise UserError(f"{what}: role {role!r} is not one of {', '.join(ROLES)}")
        ways = whole_number(size, f"{what}: {role}", 1, MAX_CHIPS)
        mesh[role] = mesh.get(role, 1) * ways
    if math.prod(mesh.values()) > MAX_CHIPS:   # each role within range, their product far beyond any machine
        raise UserError(f"{what}: {math.prod(mesh.values())} chips is out of range (1..{MAX_CHIPS})")
    return mesh


def parse_meshes(value: object) -> list[dict[str, int]]:
    """``Analysis.whatif(meshes=...)``: a list of meshes (:func:`mesh_of`), or one mesh alone."""
    return [mesh_of(m) for m in listed(value, "meshes", single=(str, Mapping))]


def parse_batch(text: str | float, today: float | None) -> float:
    """``512`` (tokens per step, global) or ``x2`` / ``x0.5`` (times today's batch); from Python, a number of
    tokens as well."""
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        return _tokens(as_float(text), text)
    if not isinstance(text, str):
        raise UserError(f"--batch {text!r}: expected a token count (4096) or a factor (x2)")
    t = text.strip().lower()
    try:
        if t.startswith(("x", "*")):
            if today is None:
                raise UserError(f"--batch {text!r}: today's batch was not read from the trace; give tokens")
            value = float(t[1:]) * today
        else:
            value = float(t)
    except ValueError:
        raise UserError(f"--batch {text!r}: expected a token count (4096) or a factor (x2)") from None
    return _tokens(value, text)


def _tokens(value: float, asked: object) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise UserError(f"--batch {asked!r}: must be a positive, finite number")
    return value


def parse_batches(value: object) -> list[str | float]:
    """``Analysis.whatif(batches=...)``: a list of batches (each read by :func:`parse_batch` once today's batch
    is known), or one batch alone (``2560``, ``"x2"``)."""
    return listed(value, "batches", single=(str, numbers.Real))


def parse_chips(value: object, what: str = "chips") -> int | None:
    """``Analysis.whatif(chips=...)``: a whole number of chips (1..MAX_CHIPS), or None for today's; ``what``
    names the value in errors (``--chips`` on the command line)."""
    return None if value is None else whole_number(value, what, 1, MAX_CHIPS)


def parse_microbatches(value: object, what: str = "microbatches") -> int | None:
    """``Analysis.whatif(microbatches=...)``: a pipeline's microbatches (at least 1), or None for the trace's
    (else the book's m = 4p); ``what`` names the value in errors."""
    return None if value is None else whole_number(value, what, 1, MAX_MICROBATCHES)


def factorisations(chips: int, roles: list[str]) -> list[dict[str, int]]:
    """Every way to write ``chips`` as a product of one size per role (order matters: fsdp=4,tensor=2 and
    fsdp=2,tensor=4 are both listed); roles of size 1 are left out of each mesh. At most MAX_CONFIGS."""
    if chips < 1 or chips > MAX_CHIPS:
        raise UserError(f"--chips {chips}: out of range (1..{MAX_CHIPS})")
    out: list[dict[str, int]] = []

    def split(left: int, at: int, sizes: tuple[int, ...]) -> None:
        if len(out) > MAX_CONFIGS:
            raise UserError(f"--chips {chips}: more than {MAX_CONFIGS} factorisations over {', '.join(roles)}; "
                            "give --mesh instead")
        if at == len(roles) - 1:
            full = sizes + (left,)
            out.append({r: s for r, s in zip(roles, full) if s > 1} or {roles[0]: 1})
            return
        for d in range(1, left + 1):
            if left % d == 0:
                split(left // d, at + 1, sizes + (d,))

    split(chips, 0, ())
    return out


@dataclass
class Request:
    """What a user asked: meshes, batches and chips; empty lists mean the defaults (docs/whatif.md)."""
    meshes: list[dict[str, int]] = field(default_factory=list)
    batches: list[str | float] = field(default_factory=list)
    chips: int | None = None
    target: Chip | None = None
    microbatches: int | None = None


def candidates(request: Request, today_mesh: dict[str, int], today_batch: float | None,
               today_chip: Chip | None, roles: list[str]) -> list[Config]:
    """The configurations to project: the asked meshes (or the factorisations of the asked or today's chip
    count over the roles the program uses) at the asked batches (or today's, 2x and 1/2), on the target."""
    chip = request.target or today_chip
    if request.meshes:
        meshes, how = request.meshes, "--mesh"
    else:
        n = request.chips or max(1, math.prod(today_mesh.values()))
        meshes, how = factorisations(n, roles or ["data"]), f"factorisation of {n} chips"
    if request.batches:
        batches = [(parse_batch(b, today_batch), f"batch {b}") for b in request.batches]
    elif today_batch is not None:
        batches = [(today_batch, "today's batch"), (2 * today_batch, "batch x2"), (today_batch / 2, "batch x0.5")]
    else:
        batches = []
    seen: set[tuple] = set()
    out = []
    for mesh in meshes:
        for batch, what in batches:
            cfg = Config(mesh, batch, chip, f"{how}, {what}", request.microbatches)
            if cfg.key() not in seen:
                seen.add(cfg.key())
                out.append(cfg)
    return out
