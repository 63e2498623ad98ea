"""torchaudio's `RNNTBeamSearch` (2.11.1, from PyPI) over a small Emformer RNN-T, as published.

The model files are loaded without torchaudio's `__init__` (its C++ extension does not load with
torch 2.13): `tests/published.py` loads `models/emformer.py`, `models/rnnt.py` and
`models/rnnt_decoder.py` by path, with a stand-in `torchaudio.models` for their imports of each
other. Nothing of the package is edited.

The beam search exports at a fixed number of frames and decodes as PyTorch does on the Python host.
Emformer's attention mask, a list of per-segment mask lists (`masks_to_concat = [rc_mask,
query_mask]`), follows its growth (a list held by another list, `tests/test_list_aliasing.py`).
Each hypothesis is a tuple of a token list, a tensor, a `List[List[Tensor]]` state and a score,
kept in lists that grow, shrink (`del`) and are permuted at run time (`[b_hypos[idx] for idx in
sorted_idx]`), and in a `Dict[str, Hypothesis]` keyed by `str(tokens)`. A list of such tuples read
at an index known only at run time is carried as one list per element: the token lists as one host
list cut at bounds (`tests/test_ragged_ints.py`), the states as lists of run-time length of each
layer's tensors, put in the order a sort chose (`tests/test_hypothesis_lists.py`); `key_to_b_hypo`,
whose keys are known only at run time, is a log of the keys' token lists and the hypotheses set
(`tests/test_run_time_dicts.py`); `del hypo_list[i]` deletes from every element's list
(`tests/test_list_deletion.py`); `torch.tensor([[token] for token in tokens])` is the rows of a
list of int lists of run-time length (`tests/test_int_rows.py`).

It runs on the compiled host: `for i, elem in enumerate(hypo_list)` runs `min([len(hypo_list)])`
times (`tests/test_host_scalars.py`), and the scores that `torch.tensor([_get_hypo_score(hypo) for
hypo in b_hypos]).sort()` reads after its `for` pass barriers there (an allocation IREE folded to 0
bytes before: README, "Known traps"; `tests/test_lists_grown_in_loops.py`).

A number of frames known only at run time works too: Emformer's mask blocks, dynamic in both dims,
grow their lists (`tests/test_ragged_first_sizes.py`), and their widths are typed by the sizes of
one run at the example inputs, so the joined mask meets the attention scores (`emformer.py:134`;
`tests/test_observed_sizes.py`). So does the published model's structure, at small sizes: frames
stacked by the time reduction, then Emformer with a right context, a left context and a memory.
"""

from __future__ import annotations

import pytest
import torch

import dycl_iree

from .conftest import export_reused
from .published import torchaudio_rnnt, torchaudio_rnnt_decoder

pytestmark = pytest.mark.published

BLANK = 5


def _beam_search(
    right_context_length: int = 0,
    left_context_length: int = 0,
    max_memory_size: int = 0,
    time_reduction_stride: int = 1,
    segment_length: int = 2,
):
    # Lengths in input frames; Emformer's are these divided by the time reduction's stride.
    decoder = torchaudio_rnnt_decoder()
    torch.manual_seed(0)
    model = torchaudio_rnnt().emformer_rnnt_model(
        input_dim=4,
        encoding_dim=8,
        num_symbols=BLANK + 1,
        segment_length=segment_length,
        right_context_length=right_context_length,
        time_reduction_input_dim=8,
        time_reduction_stride=time_reduction_stride,
        transformer_num_heads=2,
        transformer_ffn_dim=8,
        transformer_num_layers=1,
        transformer_dropout=0.0,
        transformer_activation="relu",
        transformer_left_context_length=left_context_length,
        transformer_max_memory_size=max_memory_size,
        transformer_weight_init_scale_strategy="depthwise",
        transformer_tanh_on_mem=True,
        symbol_embedding_dim=8,
        num_lstm_layers=1,
        lstm_layer_norm=True,
        lstm_layer_norm_epsilon=1e-5,
        lstm_dropout=0.0,
    )
    return decoder.RNNTBeamSearch(model.eval(), blank=BLANK, step_max_tokens=3).eval()


@pytest.fixture(scope="module")
def beam_search():
    return _beam_search()


def test_the_beam_search_scripts_and_decodes_like_its_eager_form(beam_search):
    frames, length = torch.randn(6, 4), torch.tensor([6])
    with torch.no_grad():
        eager = beam_search(frames, length, 2)
        scripted = torch.jit.script(beam_search)(frames, length, 2)
    assert [h[0] for h in scripted] == [h[0] for h in eager]
    assert [h[3] for h in scripted] == pytest.approx([h[3] for h in eager])


@pytest.fixture(scope="module")
def exported(beam_search, tmp_path_factory):
    # Reused whole while the exporter is unchanged: its lowering and `main`'s compile are minutes.
    bundle = export_reused(beam_search, (torch.randn(6, 4), torch.tensor([6]), 2))
    path = bundle.save(tmp_path_factory.mktemp("rnnt") / "beam_search.dycl")
    return bundle, dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)


# The export is slow: iree-compile takes minutes on its `main` when not cached (README, "Known traps":
# writing the vmfb is cubic in the size of one VM function). `make zoo` runs these too.
@pytest.mark.slow
def test_the_exported_beam_search_gives_pytorchs_hypotheses_on_both_hosts(beam_search, exported):
    _, compiled, python = exported
    scripted = torch.jit.script(beam_search)
    torch.manual_seed(7)
    lengths = set()
    for beam_width, scale in ((2, 1.0), (1, 1.0), (3, 1.0), (2, 3.0), (4, 0.3), (2, 10.0)):
        frames = torch.randn(6, 4) * scale
        with torch.no_grad():
            want = scripted(frames, torch.tensor([6]), beam_width)
        for run in (compiled, python):
            got = run(frames.numpy(), torch.tensor([6]).numpy(), beam_width)
            assert [list(h[0]) for h in got] == [h[0] for h in want]
            assert [h[3] for h in got] == pytest.approx([h[3] for h in want], rel=1e-4)
            assert len(got) == beam_width
        lengths.update(len(h[0]) for h in want)
    # Hypotheses that emitted different numbers of symbols: the decode loop left at different steps.
    assert len(lengths) >= 3, lengths
    assert any(sides[True] and sides[False] for sides in python.decisions.values())


@pytest.mark.slow
def test_it_takes_the_compiled_host(exported):
    bundle, _, _ = exported
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]


@pytest.fixture(scope="module")
def exported_over_frames(beam_search, tmp_path_factory):
    example = (torch.randn(6, 4), torch.tensor([6]), 2)
    bundle = dycl_iree.export(beam_search, example, dynamic_shapes=({0: "T"}, None, None))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path_factory.mktemp("rnnt_frames") / "beam_search.dycl")
    return dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)


@pytest.mark.slow
def test_a_number_of_frames_known_only_at_run_time(beam_search, exported_over_frames):
    # Emformer's joined mask meets the attention scores (`emformer.py:134`): its blocks' widths are
    # typed by the sizes of one run at the example (`tests/test_observed_sizes.py`). Odd numbers
    # of frames end in a segment of one frame; one frame is a single segment.
    scripted = torch.jit.script(beam_search)
    torch.manual_seed(11)
    lengths = set()
    for frames, beam_width, scale in ((1, 2, 1.0), (3, 1, 3.0), (5, 3, 0.3), (6, 2, 1.0), (9, 2, 10.0), (12, 4, 0.3)):
        x = torch.randn(frames, 4) * scale
        with torch.no_grad():
            want = scripted(x, torch.tensor([frames]), beam_width)
        for run in exported_over_frames:
            got = run(x.numpy(), torch.tensor([frames]).numpy(), beam_width)
            assert [list(h[0]) for h in got] == [h[0] for h in want]
            assert [h[3] for h in got] == pytest.approx([h[3] for h in want], rel=1e-4)
            assert len(got) == beam_width
        lengths.update(len(h[0]) for h in want)
    assert len(lengths) >= 3, lengths
    python = exported_over_frames[1]
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 3, 5, 6, 12} <= trips, python.trip_counts  # segments of the mask and frames decoded
    assert any(sides[True] and sides[False] for sides in python.decisions.values())


@pytest.fixture(scope="module")
def exported_with_contexts(tmp_path_factory):
    # Emformer RNN-T as published (`emformer_rnnt_base`: frames stacked by 4, segments of 16, a right
    # context of 4 and a left context of 30), at small sizes: frames stacked by 2, segments of 4,
    # right and left contexts of 4 and a memory of 2 segments (in Emformer's frames, after the time
    # reduction: segments of 2, contexts of 2). Every column group of Emformer's mask, its summary
    # rows, and the right context ahead of the utterance.
    model = _beam_search(
        right_context_length=4, left_context_length=4, max_memory_size=2, time_reduction_stride=2, segment_length=4
    )
    example = (torch.randn(18, 4), torch.tensor([14]), 2)
    bundle = dycl_iree.export(model, example, dynamic_shapes=({0: "T"}, None, None))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path_factory.mktemp("rnnt_contexts") / "beam_search.dycl")
    return model, dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)


@pytest.mark.slow
def test_contexts_and_a_memory_over_a_number_of_frames_known_only_at_run_time(exported_with_contexts):
    # The attention's rows are the right context's, the utterance's and the summary's
    # (`torch.cat([right_context, utterance, summary])`, emformer.py:161), the right context a block
    # per segment (`_gen_right_context`): typed from the run at the example, the blocks add up to
    # the rows (`tests/test_observed_sizes.py`). The summary mask's column choice, an Optional list
    # TorchScript carries through the mask loop, is the constant it starts as
    # (`tests/test_unchanged_loop_values.py`); the time reduction's reshape keeps its batch of 1, so
    # `if B == 1:` is decided at export (`tests/test_specialize.py`); the memory's pooling of one
    # Emformer frame per segment drops `ceil_mode` (`tests/test_lower.py`). The input is the
    # utterance's frames, then the right context's 4.
    model, *hosts = exported_with_contexts
    scripted = torch.jit.script(model)
    torch.manual_seed(13)
    lengths = set()
    cases = ((2, 2, 1.0), (3, 1, 3.0), (4, 3, 0.3), (6, 2, 1.0), (9, 4, 0.3), (16, 2, 10.0), (25, 3, 1.0))
    for utterance, beam_width, scale in cases:
        x, length = torch.randn(utterance + 4, 4) * scale, torch.tensor([utterance])
        with torch.no_grad():
            want = scripted(x, length, beam_width)
        for run in hosts:
            got = run(x.numpy(), length.numpy(), beam_width)
            assert [list(h[0]) for h in got] == [h[0] for h in want]
            assert [h[3] for h in got] == pytest.approx([h[3] for h in want], rel=1e-4)
            assert len(got) == beam_width
        lengths.update(len(h[0]) for h in want)
    assert len(lengths) >= 3, lengths
    trips = {count for counts in hosts[1].trip_counts.values() for count in counts}
    assert {1, 2, 3, 5, 7} <= trips, hosts[1].trip_counts  # segments of the mask, frames decoded
