"""course.checks.activation_checkpoint, tried directly on every answer the fixtures hold for its exercise
(tests/check_cases.py), on the notebook's chain and on the hidden tests' seven blocks; and the check's own
measurements (bytes saved for backward, blocks run again, the fewest blocks for a budget) against hand-computed
values of known blocks."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from course.checks import activation_checkpoint
from tests.check_cases import cases, define, judge

NOTEBOOK = "13_pytorch_sharding"
COVERED: set[str] = {"ex-checkpoint-answer"}  # the answer cells whose fixture answers this module tries
# another chain, as the hidden tests try it: a block with a wide input (it saves the third most bytes and gives back
# the fewest), ties between blocks, a budget every block checkpointed fits exactly
OTHER = {
    "widths": (40, 160, 40, 8, 160, 96, 24),
    "dim": (32, 32, 32, 256, 32, 32, 32, 32),
    "batch": 4,
    "sets": ((3,), (0, 2, 4, 6)),
    "budgets": (13_824, 10_752, 9_472, 7_168, 7_167, 24_064),  # 2, 3, 4 (a tie), 7 blocks, all exact; None; none
}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-checkpoint-answer"}), ids=str)
def test_checkpoint(case):
    names = define(case, {})
    judge(case, lambda: activation_checkpoint.checkpoint(names["forward"], names["choose"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-checkpoint-answer"}), ids=str)
def test_on_another_chain_right_answers_pass_and_wrong_ones_are_told(case):
    """What the hidden tests do, on a chain of their kind: every wrong answer, the hidden-only ones too, is told."""
    names = define(case, {})
    said = activation_checkpoint.checkpoint(names["forward"], names["choose"], **OTHER)
    assert (said is None) == case.right, f"{case}: {said}"


def test_a_block_saves_its_input_and_its_hidden_layer_before_and_after_the_gelu():
    """Batch 16, 32 features, hidden width 256, float32: 16*32*4 + 2*16*256*4 bytes; checkpointed, its input."""
    blocks, x = activation_checkpoint.chain((256,)), activation_checkpoint.inputs(16)
    assert activation_checkpoint.per_block(blocks, x) == [(2_048 + 2 * 16_384, 2_048)]
    _, saved = activation_checkpoint.saved_bytes(lambda: checkpoint(blocks[0], x, use_reentrant=False), blocks)
    assert saved == 2_048


def test_the_chains_bytes_are_the_sum_of_its_blocks_each_shared_input_once():
    """Each block's input is the block before's output: the chain saves the per-block sums, nothing twice."""
    blocks, x = activation_checkpoint.chain(), activation_checkpoint.inputs()
    sizes = activation_checkpoint.per_block(blocks, x)
    assert [s for s, _ in sizes] == [4 * 16 * (32 + 2 * w) for w in activation_checkpoint.WIDTHS]

    def run(chosen):
        h = x
        for i, block in enumerate(blocks):
            h = checkpoint(block, h, use_reentrant=False) if i in chosen else block(h)
        return h

    for chosen in [(), (1, 3), tuple(range(6))]:
        _, saved = activation_checkpoint.saved_bytes(lambda: run(chosen), blocks)
        assert saved == sum(k if i in chosen else s for i, (s, k) in enumerate(sizes)), chosen
    assert sum(s for s, _ in sizes) == 110_592 and sum(k for _, k in sizes) == 12_288  # the notebook's figures


def test_a_block_between_unequal_features_has_no_residual_and_keeps_its_wide_input():
    blocks = activation_checkpoint.chain((16, 8), dim=(32, 256, 32))
    x = activation_checkpoint.inputs(4, (32, 256, 32))
    assert [b.residual for b in blocks] == [False, False] and blocks[1](blocks[0](x)).shape == (4, 32)
    assert activation_checkpoint.per_block(blocks, x) == [(512 + 2 * 256, 512), (4_096 + 2 * 128, 4_096)]
    assert activation_checkpoint.chain((16, 8))[0].residual  # 32 features in and out
    with pytest.raises(AssertionError, match="2 blocks need 3 feature counts"):
        activation_checkpoint.chain((16, 8), dim=(32, 32))


def test_the_parameters_are_left_out_and_a_no_grad_forward_saves_nothing():
    blocks, x = activation_checkpoint.chain((64, 64)), activation_checkpoint.inputs()
    with torch.no_grad():
        _, saved = activation_checkpoint.saved_bytes(lambda: blocks[1](blocks[0](x)), blocks)
    assert saved == 0
    _, saved = activation_checkpoint.saved_bytes(lambda: blocks[0](x), torch.nn.ModuleList())
    assert saved > activation_checkpoint.per_block(blocks, x)[0][0]  # with its weights counted, more


def test_the_fewest_blocks_are_counted_by_trying_every_choice():
    sizes = [(10, 2), (30, 2), (20, 2)]  # 60 plain, 6 with all three checkpointed
    assert activation_checkpoint._fewest(sizes, 60) == 0
    assert activation_checkpoint._fewest(sizes, 32) == 1  # block 1: 2 + 10 + 20 = 32, exactly
    assert activation_checkpoint._fewest(sizes, 31) == 2
    assert activation_checkpoint._fewest(sizes, 6) == 3
    assert activation_checkpoint._fewest(sizes, 5) is None


def test_the_visible_budgets_are_the_ones_their_comment_says():
    """One block fits the first exactly; the second needs three, two if a checkpointed block kept nothing; nothing
    needs checkpointing for the third; nothing fits the fourth."""
    sizes = activation_checkpoint.per_block(activation_checkpoint.chain(), activation_checkpoint.inputs())
    exact, three, none, never = activation_checkpoint.BUDGETS
    assert sum(s for s, _ in sizes) - (34_816 - 2_048) == exact
    assert [activation_checkpoint._fewest(sizes, b) for b in activation_checkpoint.BUDGETS] == [1, 3, 0, None]
    assert sum(s for s, _ in sizes) - 34_816 - 26_624 <= three  # blocks 1 and 4 keeping nothing would fit
    assert none == sum(s for s, _ in sizes) and never == sum(k for _, k in sizes) - 1


def test_a_reentrant_checkpoint_of_the_first_block_is_told_by_its_missing_gradient():
    """What the notebook says of use_reentrant=True, and what the check says of it."""

    def forward(blocks, x, checkpointed):
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=True) if i in checkpointed else block(x)
        return x

    with pytest.warns(UserWarning):
        said = activation_checkpoint.checkpoint(forward, None, sets=[(0,)], budgets=())
    assert "block 0's up.weight got no gradient" in said


def test_the_step_times_and_bytes_of_a_trade():
    def forward(blocks, x, checkpointed):
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if i in checkpointed else block(x)
        return x

    threads = torch.get_num_threads()
    rows = activation_checkpoint.trade(forward, [(), range(6)], repeat=2)
    assert [r["saved"] for r in rows] == [110_592, 12_288] and all(r["ms"] > 0 for r in rows)
    assert torch.get_num_threads() == threads
