"""Image captioning with soft attention: a CNN encoder and an LSTM decoder, greedy decoding.

Follows "Show, Attend and Tell: Neural Image Caption Generation with Visual Attention",
Kelvin Xu, Jimmy Ba, Ryan Kiros, Kyunghyun Cho, Aaron Courville, Ruslan Salakhutdinov,
Richard Zemel, Yoshua Bengio, ICML 2015 (the DyCL paper evaluated encoder-decoders of this kind
with ResNet/ResNeXt encoders). The encoder turns the image into L annotation vectors a_1..a_L
(a grid of CNN features). The decoder is an LSTM; at each step it
- scores every annotation with additive attention `e_i = v^T tanh(W_a a_i + W_h h_{t-1})`,
  normalises with softmax and takes the context `z_t = beta_t * sum_i alpha_i a_i`, where
  `beta_t = sigmoid(f_beta(h_{t-1}))` is the paper's gating scalar (section 4.2.1);
- runs the LSTM cell on [embedding of the previous word, z_t];
- predicts the word with the paper's deep output layer `L_o(E y_{t-1} + L_h h_t + L_z z_t)`.
The initial LSTM state is an MLP (one linear + tanh per state) of the mean annotation.

Greedy decoding: start from the start token and take the argmax word each step, collecting the
words in a `List[int]`, until the end token comes out or `max_length` words were made. As the
published decoders do, the caption is returned from inside the decode loop when the end token comes
out, and after the loop when the cap is reached. The output `torch.tensor(tokens)` therefore has a
data-dependent length; it ends with the end token exactly when the loop returned early.

Scaled down: the encoder is a 3-block ResNet (16-16-32-32 channels) giving a 4x4 grid of 32-d
annotation vectors (L=16, D=32) instead of a 14x14x512 VGG/ResNet grid; embedding 16, LSTM hidden
32, attention 24, vocabulary 20 (0 = padding, 1 = start, 2 = end), length cap 12. Batch 1,
3x32x32, random seeded weights (no training).

Calibration (stands in for training; not in the paper):
- the encoder's BatchNorm statistics are fitted on random images (`fit_batch_norms`);
- with default initialisation the image hardly changes the words, so the layers that carry it
  start with 3x the default weights (`image_gain`);
- a random decoder either stops at once or never, so the end token's output bias gets +0.75
  (END_BIAS, found offline by `models/calibrate.py`); the shipped SAMPLES stop on the end token
  after 1, 5, 9 and 11 words or hit the cap (two different captions), with every argmax at least
  1e-3 ahead of the runner-up so a compiled copy cannot pick another word by rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from models.common import BasicBlock, conv_bn_relu, fit_batch_norms, image_inputs, sample_builders, seeded

VOCABULARY_SIZE = 20
START_TOKEN = 1
END_TOKEN = 2


class Encoder(nn.Module):
    """Small ResNet: 32x32 image -> 4x4 grid of `feature_size`-d annotation vectors, shape (1, 16, D)."""

    def __init__(self, feature_size: int = 32) -> None:
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.blocks = nn.Sequential(
            BasicBlock(16, 16, 2), BasicBlock(16, feature_size, 2), BasicBlock(feature_size, feature_size, 2)
        )

    def forward(self, image: Tensor) -> Tensor:
        grid = self.blocks(self.stem(image))  # (1, D, 4, 4)
        return torch.flatten(grid, 2).transpose(1, 2)  # (1, L=16, D)


class ShowAttendTell(nn.Module):
    """Encoder + attention LSTM decoder; forward(image) -> 1-D int64 tensor of generated words."""

    def __init__(
        self,
        feature_size: int = 32,
        embedding_size: int = 16,
        hidden_size: int = 32,
        attention_size: int = 24,
        max_length: int = 12,
        end_bias: float = 0.0,
        image_gain: float = 3.0,
    ) -> None:
        super().__init__()
        self.encoder = Encoder(feature_size)
        self.embedding = nn.Embedding(VOCABULARY_SIZE, embedding_size)
        self.init_hidden = nn.Linear(feature_size, hidden_size)
        self.init_cell = nn.Linear(feature_size, hidden_size)
        self.attend_features = nn.Linear(feature_size, attention_size)  # W_a
        self.attend_hidden = nn.Linear(hidden_size, attention_size)  # W_h
        self.attend_score = nn.Linear(attention_size, 1)  # v
        self.context_gate = nn.Linear(hidden_size, 1)  # f_beta
        self.cell = nn.LSTMCell(embedding_size + feature_size, hidden_size)
        self.output_hidden = nn.Linear(hidden_size, embedding_size)  # L_h
        self.output_context = nn.Linear(feature_size, embedding_size)  # L_z
        self.output_words = nn.Linear(embedding_size, VOCABULARY_SIZE)  # L_o
        with torch.no_grad():
            # With PyTorch's default init the previous word's embedding dominates the output layer
            # and every image gets the same caption; scaling the initial weights of the layers that
            # carry the image (initial state, attention, L_h, L_z) lets it change the words.
            for layer in (
                self.init_hidden,
                self.init_cell,
                self.attend_features,
                self.attend_hidden,
                self.output_hidden,
                self.output_context,
            ):
                layer.weight.mul_(image_gain)
            self.output_words.bias[END_TOKEN] += end_bias
        self.max_length = max_length
        # As the published captioners do, special tokens are looked up in the word map.
        self.word_map = {"<pad>": 0, "<start>": START_TOKEN, "<end>": END_TOKEN}
        self.start_token = START_TOKEN
        self.end_token = END_TOKEN

    def attend(self, annotations: Tensor, projected: Tensor, hidden: Tensor) -> Tensor:
        """Soft attention context z_t for the previous hidden state, gated by beta_t."""
        scores = self.attend_score(torch.tanh(projected + self.attend_hidden(hidden).unsqueeze(1)))  # (1, L, 1)
        weights = torch.softmax(scores, dim=1)
        context = (weights * annotations).sum(dim=1)  # (1, D)
        return torch.sigmoid(self.context_gate(hidden)) * context

    def forward(self, image: Tensor) -> Tensor:
        annotations = self.encoder(image)
        projected = self.attend_features(annotations)  # W_a a_i does not change between steps
        mean_annotation = annotations.mean(dim=1)
        hidden = torch.tanh(self.init_hidden(mean_annotation))
        cell = torch.tanh(self.init_cell(mean_annotation))
        word = torch.full((1,), self.word_map["<start>"], dtype=torch.long)
        tokens: list[int] = []
        for _ in range(self.max_length):
            embedded = self.embedding(word)  # (1, E)
            context = self.attend(annotations, projected, hidden)
            hidden, cell = self.cell(torch.cat((embedded, context), dim=1), (hidden, cell))
            logits = self.output_words(embedded + self.output_hidden(hidden) + self.output_context(context))
            word = torch.argmax(logits, dim=1)
            token = int(word.item())
            tokens.append(token)
            if token == self.word_map["<end>"]:
                return torch.tensor(tokens, dtype=torch.long)
        return torch.tensor(tokens, dtype=torch.long)

    @torch.jit.unused
    def run_encoder(self, image: Tensor) -> Tensor:
        """The encoder alone, for a batch (used to fit BatchNorm statistics)."""
        return self.encoder(image)


def build_show_attend_tell(max_length: int = 12, end_bias: float = 0.0, seed: int = 0) -> ShowAttendTell:
    """The captioning model in eval mode.

    >>> from models.common import random_image
    >>> tokens = build_show_attend_tell()(random_image(0))
    >>> tokens.dtype, tokens.dim()
    (torch.int64, 1)
    """
    with seeded(seed):
        model = ShowAttendTell(max_length=max_length, end_bias=end_bias)
    fit_batch_norms(model, model.run_encoder, seed + 1)
    return model


# ---------------------------------------------------------------------------------------------
# Calibrated zoo entry (values found by models/calibrate.py; see the module docstring)
# ---------------------------------------------------------------------------------------------

END_BIAS = 0.75

# (seed, scale, shift) per random_image: runs that stop on the end token after different numbers of
# words and runs that hit the cap; printed by `python -m models.calibrate`.
SAMPLE_SPECS: dict[str, list[tuple[int, float, float]]] = {
    "show_attend_tell": [(9, 1.0, 0.0), (0, 2.0, 0.0), (1, 2.0, 0.0), (5, 1.0, 0.0), (12, 2.0, 0.0), (0, 0.5, 0.0)]
}


def show_attend_tell() -> tuple[nn.Module, tuple]:
    """The captioning model with its calibrated end-token bias; example input: its first sample."""
    return build_show_attend_tell(end_bias=END_BIAS), image_inputs(SAMPLE_SPECS["show_attend_tell"][0])


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {"show_attend_tell": show_attend_tell}


SAMPLES: dict[str, Callable[[], list[tuple]]] = sample_builders(SAMPLE_SPECS)
