"""How each nn op becomes CUDA C in a fused kernel: the per-op lowering rules.

An op reaches a native kernel through one of two rule kinds, registered under its class by
the family modules of ``partita.lowering.cuda.ops`` (mirroring ``partita.dialects.nn``):

* ``@injective(OpClass)``: the op's value at an output index is a C expression of its
  operands' values at other indices (TVM's ``kElemWise`` / ``kBroadcast`` /
  ``kInjective``). The rule gets the emitter, the op and the index (one C expression per
  axis) and returns the expression, typed in the result's compute type
  (``KernelEmitter.ctype``). It reads operands with ``emitter.value(operand, index)``, so
  injective producers are inlined (``compute_inline``). Such ops chain freely in a group.
* ``@window(OpClass)``: the op anchors a kernel in which one thread computes one output
  element with a loop over the operand elements it needs (reductions over any axes,
  arg-reductions, scans, direct convolutions, ...; TVM's ``kCommReduce`` /
  ``kOutEWiseFusable`` scheduled naively). Its operands are kernel arguments (or, for a
  rule that ``reads_views``, index views of them), read with ``emitter.load(operand,
  index)``; the rule returns the C lines that declare ``y``, the
  op's value at ``emitter.out_index``. Element-wise consumers join as an epilogue.
* ``@rowwise(OpClass)``: the op reduces the trailing axes of its one input (a contiguous
  row per output element) and anchors a ``rowwise`` kernel: one thread block per row,
  threads fold strided slices of the row, then a block tree reduction (warp shuffles,
  then shared memory), thread 0 computes ``y`` and runs the epilogue. The rule returns a
  ``RowReduction``: the folds over the row and ``y`` from their results. An op may have
  both a ``rowwise`` rule (taken first when it ``supports`` the op) and a ``window`` one.

Both take ``supports(op) -> bool`` (e.g. static dims only), and, for results with
dynamic dims, ``dims(emitter, op) -> list[Dim]`` deriving them from the kernel's
run-time dims (without it, an op with a dynamic result stays on the host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation, SSAValue

if TYPE_CHECKING:  # pragma: no cover
    from partita.lowering.cuda.cexpr import Dim
    from partita.lowering.cuda.kernel import KernelEmitter

__all__ = ["INJECTIVE", "ROWWISE", "WINDOW", "Fold", "InPlace", "RowReduction", "Rule", "TiledProduct", "WholeKernel",
           "injective", "rowwise", "window"]


@dataclass(frozen=True)
class WholeKernel:
    """A window rule's whole-kernel schedule (``Rule.kernel``): the kernel's body and its
    launch. Its blocks must stride over its tiles."""

    lines: list[str]
    """The body: every statement of the kernel after its run-time dims."""
    block: int
    """Threads per block."""
    block_rows: tuple[int, ...] = ()
    """``(axis, rows)``: a tile is ``rows`` output rows along ``axis`` at one index of the
    other axes but the last, and the launch has a block per tile
    (``WindowRecord.block_rows``); empty: the window geometry (``ceil(numel / block)``
    blocks, capped)."""
    smem: int = 0
    """Bytes of dynamic shared memory a block takes (the body's ``extern __shared__``
    array): past 48 KiB the kernel is opted in at load (``WindowRecord.smem``)."""


@dataclass(frozen=True)
class InPlace:
    """How an op that replaces part of one operand (a KV cache's TensorScatter, ScatterND, ScatterElements)
    is computed in place, when its result is tied to that operand's buffer
    (``byoc.tied_operand``): a ``scatter`` kernel runs one thread per element of
    ``source(op)`` and stores it where it lands; the rest of the buffer is never touched,
    so a decode step moves its new rows, not the cache."""

    destination: Callable[[Operation], SSAValue]
    """The operand the result replaces part of (the one it may be tied to)."""
    source: Callable[[Operation], SSAValue]
    """The operand whose elements are written (one thread each)."""
    store: Callable[..., tuple[list[str], str]]
    """``(emitter, op, source index) -> (result index, C condition)``: where the source's
    element at that index lands, and when it is written at all."""
    applies: Callable[[Operation], bool] | None = None
    """Whether this op can be computed so (a scatter that combines updates with what is
    there cannot, in parallel); always when absent."""

    def accepts(self, op: Operation) -> bool:
        return self.applies is None or bool(self.applies(op))


@dataclass(frozen=True)
class Rule:
    emit: Callable[..., Any]
    """Injective: ``(emitter, op, index) -> str``; window: ``(emitter, op) -> list[str]``."""
    supports: Callable[[Operation], bool] | None = None
    dims: Callable[[KernelEmitter, Operation], list[Dim]] | None = None
    elementwise: bool = False
    """Injective rules only: the op reads each operand at the (broadcast) output index,
    so it may follow an anchor in its epilogue."""
    kernel: Callable[..., Any] | None = None
    """Window rules only: ``(emitter, op) -> WholeKernel | None``, a whole-kernel schedule
    used instead of the per-element loop when the kernel is the anchor alone (no epilogue)
    and it returns one."""
    view: Callable[..., Any] | None = None
    """Injective rules only: ``(emitter, op, index) -> index into operand 0``, for an op
    that only remaps the indices of its first operand (its other operands give shapes, or,
    for a gather, the indices it reads with ``emitter.load``: kernel arguments or views of
    them): a kernel reads through it with index arithmetic alone (``fusion.is_view``)."""
    in_place: InPlace | None = None
    """Injective and window rules: the op's in-place form (see ``InPlace``)."""
    reads_views: bool = False
    """Window rules only: the rule reads its operands only with ``emitter.load``, so an
    operand may be an index view of a kernel argument (a head split of a packed QKV
    projection: ``nn.strided_slice`` + ``nn.reshape``) that the kernel reads through
    instead of a kernel of its own copying it."""
    computes: tuple[int, ...] = ()
    """Window rules that ``reads_views`` only: the operands (by index) the rule reads with
    ``emitter.computed`` at an index of its own, so injective ops computing one join the
    kernel and run where it is read (the rotary embedding's cos / sin tables, made from
    positions and frequencies, are recomputed per element instead of being kernels and a
    table in memory of their own)."""
    warp: Callable[..., Any] | None = None
    """Window rules only: ``(emitter, op) -> (lines, y) | None``, the warp-per-output
    schedule of a long reduction (a GEMV's dot products): ``lines`` add this lane's share
    (``lane`` of 32) of the output at ``emitter.out_index`` into ``float acc``; after the
    warp's shuffle tree lane 0 declares ``y`` (a C expression of the sum ``acc``), then
    the epilogue runs and stores, as in the per-element loop."""

    tiles: Callable[..., Any] | None = None
    """Window rules only: ``(emitter, op) -> TiledProduct | None``, the op as a product the
    tile schedules compute (tensor-core tiles for f16 / bf16 operands, SIMT ones else; a
    weight-only quantized GEMM dequantizing its weight tile as it stages it). With a
    ``warp`` schedule too, the kernel runs the warp one for at most ``schedules.GEMV_ROWS``
    rows (known at launch) and the tiles beyond."""

    def accepts(self, op: Operation) -> bool:
        return self.supports is None or bool(self.supports(op))


@dataclass(frozen=True)
class Staging:
    """A product's own way to stage an operand's 8-element vectors into the tensor-core
    tiles (``schedules.MMA_K``-deep K steps): what a thread loads for its vector ``i``
    (0 or 1) of the step at ``kn`` goes to registers in ``fetch``, issued before the
    current step's MMAs; ``store`` turns them into ``vec`` (a ``partita_v16`` of 8 elements
    of the MMA type), written to shared memory after them. ``declare`` declares the
    registers (arrays indexed by ``i``). Both see the vector's row ``r`` (of the tile's
    128) and first K offset ``c`` (0, 8, 16, 24), its elements K-contiguous; ``fetch``
    leaves registers that ``store`` turns into zeros past the edges."""

    declare: tuple[str, ...]
    fetch: tuple[str, ...]
    store: tuple[str, ...]


@dataclass(frozen=True)
class TiledProduct:
    """What the tile schedules read of an anchor that is a product ``A[M, K] ·
    B[K, N]`` (its output ``[..., N]``, the rows ``M`` its leading axes): each operand's
    element as a C expression (compute type) of the tile's indices, ``mm`` and ``kk`` for
    A, ``kk`` and ``nn`` for B (in range: the schedule bounds-checks them), and which axis
    of each is contiguous in memory, so the threads staging a tile walk it."""

    dtype: str
    """A's element type (``f16`` / ``bf16``, ``i8`` / ``ui8``: the tensor cores take the
    product)."""
    k: Dim
    a: str
    b: str
    """B's element (``""`` with ``stage_b``)."""
    a_rows: bool
    """A's K axis is contiguous (``a[mm, kk]`` row-major), else its M axis."""
    b_rows: bool
    """B's N axis is contiguous (``b[kk, nn]`` row-major), else its K axis."""
    a_ptr: str = ""
    """Tensor-core tiles: A as a pointer of the MMA type, read 16 bytes (8 elements along
    its contiguous axis) a load where the pointer and K allow; ``""``: element by element."""
    b_ptr: str = ""
    """Likewise B."""
    stage_b: Staging | None = None
    """Tensor-core tiles: B's own staging, in place of ``b`` (a packed 4-bit weight's 8
    codes a 32-bit word, dequantized by their block's scale and zero point)."""
    b_dtype: str = ""
    """B's element type where it is not A's (an integer product of u8 by s8)."""
    zero_points: tuple[str, ...] = ()
    """An integer product's zero points of A and B (``int`` C expressions): the tiles
    multiply the raw 8-bit values and subtract the zero points' terms in the epilogue
    (``(a - za)(b - zb)`` summed over K is ``ab - zb·Σa - za·Σb + K·za·zb``)."""

    k_source: tuple[int, int] | None = None
    """The kernel input and axis K is read from at launch (split-K chooses its slices by
    it); ``None``: ``k`` itself, when static."""

    @property
    def b_type(self) -> str:
        return self.b_dtype or self.dtype


INJECTIVE: dict[type[Operation], Rule] = {}
"""Injective rules by op class (a registration table, filled at import)."""
WINDOW: dict[type[Operation], Rule] = {}
"""Window (per-output-element loop) rules by op class."""
ROWWISE: dict[type[Operation], Rule] = {}
"""Row-reduction (one block per row) rules by op class."""

COMBINES = ("+", "*", "max", "min", "argmax", "argmin")


@dataclass(frozen=True)
class Fold:
    """One pass over the reduced elements: ``acc`` (of C type ``ctype``) starts at ``init``,
    the identity of ``combine``, and folds in ``term``, a C expression of the element ``v``
    (the input's compute type). ``max`` / ``min`` propagate a float NaN; ``argmax`` /
    ``argmin`` also keep the index ``<acc>_at`` of the best element (``-1`` for none) and
    pick it as NumPy does: the first NaN, else the first best (the last with ``last``).
    ``then`` lines follow once ``acc`` holds the whole row's value (later folds and ``y``
    may read what they declare)."""

    acc: str
    ctype: str
    init: str
    combine: str
    term: str = "v"
    then: tuple[str, ...] = ()
    last: bool = False

    def __post_init__(self):
        assert self.combine in COMBINES, self.combine

    @property
    def is_arg(self) -> bool:
        return self.combine in ("argmax", "argmin")

    def better(self, t: str, k: str, b: str, j: str) -> str:
        """C condition: element ``t`` at index ``k`` beats ``b`` at ``j`` (arg folds; an
        index ``< 0`` is no element). A strict total order on distinct indices, so a tree
        of these picks what the serial scan picks."""
        cmp = ">" if self.combine == "argmax" else "<"
        tie = ">" if self.last else "<"
        if self.ctype in ("float", "double"):
            ordered = (f"({t} != {t} ? ({b} == {b} || {k} {tie} {j}) : "
                       f"({b} == {b} && ({t} {cmp} {b} || ({t} == {b} && {k} {tie} {j}))))")
        else:
            ordered = f"({t} {cmp} {b} || ({t} == {b} && {k} {tie} {j}))"
        return f"{k} >= 0 && ({j} < 0 || {ordered})"

    def step(self, index: str = "") -> list[str]:
        """C lines folding the element ``v`` (at ``index`` along the row, arg folds only)
        into ``acc``, as a serial loop body."""
        a = self.acc
        match self.combine:
            case "+" | "*":
                return [f"{a} {self.combine}= {self.term};"]
            case "max" | "min":
                cmp = ">" if self.combine == "max" else "<"
                nan = " || t != t" if self.ctype in ("float", "double") else ""  # NaN propagates
                return [f"{{ const {self.ctype} t = {self.term}; if (t {cmp} {a}{nan}) {a} = t; }}"]
        return [f"{{ const {self.ctype} t = {self.term}; const long long k = {index};",
                f"  if ({self.better('t', 'k', a, a + '_at')}) {{ {a} = t; {a}_at = k; }} }}"]


@dataclass(frozen=True)
class RowReduction:
    """What a ``rowwise`` rule computes: ``folds`` over the trailing ``axes`` of ``input``
    (a kernel argument), in order, then the op's value ``y`` (a C expression of their
    results, in the result's compute type)."""

    input: SSAValue
    axes: tuple[int, ...]
    folds: tuple[Fold, ...]
    y: str


def _register(table: dict[type[Operation], Rule], op_types, supports, dims, elementwise=False,
              kernel=None, view=None, reads_views=False, in_place=None, warp=None, tiles=None, computes=()):
    def decorate(fn):
        for t in op_types:
            # An op may have a rowwise rule and a window one (the fallback), nothing else twice.
            anchored = t in WINDOW or t in ROWWISE
            if t in table or (t in INJECTIVE if table is not INJECTIVE else anchored):
                raise ValueError(f"{t.name} already has a CUDA lowering rule")
            table[t] = Rule(fn, supports, dims, elementwise, kernel, view, in_place, reads_views, tuple(computes), warp,
                            tiles)
        return fn

    return decorate


def injective(*op_types: type[Operation], supports=None, dims=None, elementwise=False, view=None, in_place=None):
    """Register ``fn(emitter, op, index) -> C expression`` for ``op_types``; pass
    ``elementwise=True`` when the op reads its operands at the broadcast output index,
    its index map ``view`` when it only remaps the indices of its first operand, and its
    ``InPlace`` form when it replaces part of an operand."""
    return _register(INJECTIVE, op_types, supports, dims, elementwise, view=view, in_place=in_place)


def window(*op_types: type[Operation], supports=None, dims=None, kernel=None, reads_views=False, in_place=None,
           warp=None, tiles=None, computes=()):
    """Register ``fn(emitter, op) -> lines declaring y`` for ``op_types`` (and, optionally,
    a whole-kernel schedule ``kernel``, see ``Rule.kernel``; a warp-per-output schedule
    ``warp``, see ``Rule.warp``; a tensor-core tile schedule ``tiles``, see ``Rule.tiles``;
    ``reads_views`` and ``computes``, see ``Rule.reads_views`` and ``Rule.computes``; its
    ``InPlace`` form when it replaces part of an operand)."""
    if computes and not reads_views:
        raise ValueError("a rule that computes operands reads the others through views (reads_views=True)")
    return _register(WINDOW, op_types, supports, dims, kernel=kernel, reads_views=reads_views, in_place=in_place,
                     warp=warp, tiles=tiles, computes=computes)


def rowwise(*op_types: type[Operation], supports=None, dims=None):
    """Register ``fn(emitter, op) -> RowReduction`` for ``op_types``."""
    return _register(ROWWISE, op_types, supports, dims)
