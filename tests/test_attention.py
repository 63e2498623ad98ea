"""`nn.MultiheadAttention` in user code: self-attention over a padded batch, then attention to a
memory that a data-dependent test can skip.

Freezing leaves the module's reads of its Optional attributes (`in_proj_bias`, `q_proj_weight`...)
as attribute reads, which the exporter now reads from the frozen module; the module asks `query is
key` and `key is value` to pick its packed projection, which the exporter answers from the values
(the same value is the same tensor). The padding mask is sized by an int read from the lengths, as
torchaudio's and fairseq's encoders make it.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.conftest import check_hosts, export_compiled


class _AttendThenMaybeRemember(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(16, 4, batch_first=True)
        # A memory of another width: separate query, key and value projections.
        self.cross = nn.MultiheadAttention(16, 2, batch_first=True, kdim=8, vdim=8)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, memory: torch.Tensor, threshold: float):
        max_length = int(lengths.max().item())
        padding = torch.arange(max_length).unsqueeze(0) >= lengths.unsqueeze(1)
        attended, _ = self.self_attn(x, x, x, key_padding_mask=padding)
        h = self.norm(x + attended)
        if float(h.abs().mean()) > threshold:
            return h, torch.zeros(h.shape[0], h.shape[1], memory.shape[1])
        remembered, weights = self.cross(h, memory, memory)
        return self.norm(h + remembered), weights


def test_multihead_attention_with_a_padding_mask_and_a_skipped_memory(tmp_path) -> None:
    torch.manual_seed(0)
    example = (torch.randn(2, 6, 16), torch.tensor([6, 4]), torch.randn(2, 5, 8), 0.5)
    _, scripted, compiled, python = export_compiled(
        tmp_path,
        _AttendThenMaybeRemember(),
        example,
        "attention",
        dynamic_shapes=({1: "frames"}, None, {1: "memory"}, None),
    )
    generator = torch.Generator().manual_seed(1)
    for frames, lengths, memory, threshold in ((6, [6, 4], 5, 0.0), (9, [3, 9], 2, 10.0), (3, [3, 3], 7, 10.0)):
        x = torch.randn(2, frames, 16, generator=generator)
        inputs = (x, torch.tensor(lengths), torch.randn(2, memory, 8, generator=generator), threshold)
        check_hosts(scripted, (compiled, python), inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions  # skipped once
