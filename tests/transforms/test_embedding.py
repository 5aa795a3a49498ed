"""Partita as a lowering stage inside someone else's xDSL pipeline."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.passes import PassPipeline

from partita.dialects import get_all_dialects
from partita.transforms import get_all_passes

TEXT = """
func.func @main(%x: tensor<8x16xf16>, %w: tensor<4x16xf16>) -> tensor<8x4xf16> {
  %0 = nn.dense %x, %w : (tensor<8x16xf16>, tensor<4x16xf16>) -> tensor<8x4xf16>
  func.return %0 : tensor<8x4xf16>
}
"""


def test_a_plain_xdsl_context_runs_partita_passes() -> None:
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    module = Parser(ctx, TEXT).parse_module()
    pipeline = PassPipeline.parse_spec(get_all_passes(), "partition-eager{backends=cutlass},outline-compiler-functions")
    pipeline.apply(ctx, module)
    module.verify()
    text = str(module)
    assert "func.func private @tvmgen_default_cutlass_main_0" in text
    assert 'byoc.composite = "cutlass.dense"' in text


def test_every_registered_pass_loads_and_has_its_name() -> None:
    for name, factory in get_all_passes().items():
        assert factory().name == name
