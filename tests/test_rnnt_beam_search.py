"""torchaudio's `RNNTBeamSearch` (2.11.1, from PyPI) over a small Emformer RNN-T, as published.

The model files are loaded without torchaudio's `__init__` (its C++ extension does not load with
torch 2.13): `tests/published.py` loads `models/emformer.py`, `models/rnnt.py` and
`models/rnnt_decoder.py` by path, with a stand-in `torchaudio.models` for their imports of each
other. Nothing of the package is edited.

The beam search does not export yet. Emformer's attention mask, a list of per-segment mask lists
(`masks_to_concat = [rc_mask, query_mask]`) that grow with the run-time length, now exports (a list
held by another list follows its growth, `tests/test_list_aliasing.py`). Each hypothesis is a tuple
of a token list, a tensor, a `List[List[Tensor]]` state and a score, kept in lists that grow, shrink
(`del`) and are permuted at run time (`[b_hypos[idx] for idx in sorted_idx]`), and in a
`Dict[str, Hypothesis]` keyed by `str(tokens)`. A list of such tuples read at an index known only at
run time is now carried as one list per element: the token lists as one host list cut at bounds
(`tests/test_ragged_ints.py`), the states as lists of run-time length of each layer's tensors, put
in the order a sort chose (`tests/test_hypothesis_lists.py`); `key_to_b_hypo`, whose keys
(`str(tokens)`) are known only at run time, is a log of the keys' token lists and the hypotheses set
(`tests/test_run_time_dicts.py`, the Python host's); `del hypo_list[i]` deletes from every
element's list (`tests/test_list_deletion.py`). What stops it next: `_gen_new_hypos`'s
`torch.tensor([[token] for token in tokens])`, a list of lists built at run time (its length is the
number of hypotheses that beat the best finished score). The test below pins that refusal, so that
a change in what stops the export is seen.
"""

from __future__ import annotations

import pytest
import torch

import dycl_iree

from .published import torchaudio_rnnt, torchaudio_rnnt_decoder

pytestmark = pytest.mark.published

BLANK = 5


@pytest.fixture(scope="module")
def beam_search():
    decoder = torchaudio_rnnt_decoder()
    torch.manual_seed(0)
    model = torchaudio_rnnt().emformer_rnnt_model(
        input_dim=4,
        encoding_dim=8,
        num_symbols=BLANK + 1,
        segment_length=2,
        right_context_length=0,
        time_reduction_input_dim=8,
        time_reduction_stride=1,
        transformer_num_heads=2,
        transformer_ffn_dim=8,
        transformer_num_layers=1,
        transformer_dropout=0.0,
        transformer_activation="relu",
        transformer_left_context_length=0,
        transformer_max_memory_size=0,
        transformer_weight_init_scale_strategy="depthwise",
        transformer_tanh_on_mem=True,
        symbol_embedding_dim=8,
        num_lstm_layers=1,
        lstm_layer_norm=True,
        lstm_layer_norm_epsilon=1e-5,
        lstm_dropout=0.0,
    )
    return decoder.RNNTBeamSearch(model.eval(), blank=BLANK, step_max_tokens=3).eval()


def test_the_beam_search_scripts_and_decodes_like_its_eager_form(beam_search):
    frames, length = torch.randn(6, 4), torch.tensor([6])
    with torch.no_grad():
        eager = beam_search(frames, length, 2)
        scripted = torch.jit.script(beam_search)(frames, length, 2)
    assert [h[0] for h in scripted] == [h[0] for h in eager]
    assert [h[3] for h in scripted] == pytest.approx([h[3] for h in eager])


def test_its_export_is_refused_at_the_token_rows_it_builds_at_run_time(beam_search):
    message = (
        r"a list whose length depends on the path holds something other than tensors "
        r"\(.*rnnt_decoder.py:\d+\): only lists of tensors, ints, floats or bools"
    )
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(beam_search, (torch.randn(6, 4), torch.tensor([6]), 2))
