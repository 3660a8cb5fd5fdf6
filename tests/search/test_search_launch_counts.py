"""Launch knobs versus counts (launch/finder.py): a tile size is a choice; a number of programs or blocks
derived from the inputs, or a BLOCK-named plain runtime int, is not. The fixture launcher is written
for these tests in the shape of LMDeploy's fill_kv_cache launcher (a paged cache's block count in the
grid, 1 when decoding) plus the cases a fix must keep: a literal split count and a computed tile."""

from __future__ import annotations

from kernelsmith.launch.tunables import discover, label, relevant

PAGED = """import triton
import triton.language as tl


@triton.jit
def _fill_kernel(src, dst, table, n, page_size, is_decoding: tl.constexpr,
                 BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, SPLITS: tl.constexpr):
    pid = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    d = tl.arange(0, BLOCK_D)
    for s in range(SPLITS):
        page = tl.load(table + pid * page_size + s)
        x = tl.load(src + offs[:, None] * BLOCK_D + d[None, :], mask=offs[:, None] < n)
        tl.store(dst + page * BLOCK + offs[:, None] * BLOCK_D + d[None, :], x, mask=offs[:, None] < n)


def fill(src, dst, table, max_q_len, head_dim):
    block_size = dst.size(1)
    if max_q_len == 1:
        max_num_blocks = 1
    else:
        max_num_blocks = triton.cdiv(max_q_len, block_size) + 1
    seq_pages = 1 if max_q_len == 1 else triton.cdiv(max_q_len, 16)
    num_splits = 4
    BLOCK = 64 if max_q_len > 1 else triton.next_power_of_2(max_q_len)
    grid = (num_splits, max_num_blocks, triton.cdiv(src.size(0), BLOCK), seq_pages)
    _fill_kernel[grid](src, dst, table, src.size(0), BLOCK_SIZE_PAGE, is_decoding=max_num_blocks == 1,
                       BLOCK=BLOCK, BLOCK_D=triton.next_power_of_2(head_dim), SPLITS=num_splits,
                       num_warps=4)


BLOCK_SIZE_PAGE = 16
"""


def _labels(code: str) -> dict[str, tuple]:
    return {label(t): (t.kind, t.base) for t in relevant(discover(code), code, "fill")}


def test_counts_derived_from_the_inputs_are_not_knobs_tiles_and_literal_counts_are():
    labels = _labels(PAGED)
    assert "max_num_blocks" not in labels  # 1 when decoding, else computed: a count, not a choice
    assert labels["num_splits"] == ("block", 4)  # a count that is only ever a literal is a choice
    assert labels["BLOCK"] == ("block", 64)  # a tile sizing tl.arange, inside the grid's cdiv
    assert labels["num_warps"] == ("num_warps", 4)


def test_a_grid_dimension_computed_from_the_inputs_is_a_count_whatever_its_name():
    # `seq_pages` is no knob name; named like one (a BLOCK-ish name) it is still the grid's count.
    code = PAGED.replace("seq_pages", "SEQ_BLOCK_PAGES")
    assert "SEQ_BLOCK_PAGES" not in _labels(code)
    # The same name as a literal-only grid dimension stays a choice.
    literal = code.replace("1 if max_q_len == 1 else triton.cdiv(max_q_len, 16)", "2")
    assert _labels(literal)["SEQ_BLOCK_PAGES"] == ("block", 2)


def test_a_block_named_runtime_int_is_not_a_tile():
    # The page size reaches a plain (non-constexpr) parameter: it cannot size a tl.arange.
    code = (
        PAGED.replace("n, page_size, is_decoding", "n, BLOCK_PAGE, is_decoding")
        .replace("pid * page_size", "pid * BLOCK_PAGE")
        .replace("src.size(0), BLOCK_SIZE_PAGE, is_decoding", "src.size(0), BLOCK_PAGE=16, is_decoding")
    )
    labels = _labels(code)
    assert not any("BLOCK_PAGE" in name for name in labels), labels
    # Made a constexpr, the same literal is a tile size again.
    constexpr = code.replace("n, BLOCK_PAGE, is_decoding", "n, BLOCK_PAGE: tl.constexpr, is_decoding")
    assert _labels(constexpr)["BLOCK_PAGE"] == ("block", 16)
