"""Voice Activity Projection (Ekstedt & Skantze, "Voice Activity Projection: Self-supervised Learning of
Turn-taking Events", Interspeech 2022), written from the authors' model code
(ErikEkstedt/VoiceActivityProjection, vap/modules) so that their released state dict
(example/checkpoints/VAP_state_dict.pt) loads into it key for key.

The network, per 16 kHz stereo waveform (one channel per speaker):

- a frozen CPC encoder per channel (shared weights): five 1-D convolutions with a channel norm (a
  per-frame normalisation over channels, unbiased variance) and ReLU — 100 Hz —, a GRU or LSTM
  ("gAR"), then a causal convolution (kernel 5, stride 2) + LayerNorm + GELU: 50 Hz frames;
- a per-channel transformer ("ar_channel", shared weights) and a cross-attention transformer ("ar")
  whose layers update each channel from itself and the other channel, both causal with ALiBi
  biases (a head's bias m_h x key position; scores scaled by 1/sqrt(model dim), as theirs); a
  combinator joins the channels (GELU(LN(W_a x1)) + GELU(LN(W_b x2)));
- a head over 256 discrete states of the next 2 s of voice activity: per speaker 4 bins of 0.2, 0.4,
  0.6 and 0.8 s, a bin active when the speaker is active in at least half of its frames; state index
  = sum of bit_j x 2^j with j = 4 x speaker + bin (their Codebook).

Layer sizes come from the state dict's shapes (as their load_model_from_state_dict), so a small
model saved in the same layout loads the same way. Dropout is absent: the model only scores.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

from sdscore.errors import ModelError

SAMPLE_RATE = 16000
FRAME_HZ = 50
BIN_FRAMES = (10, 20, 30, 40)  # 0.2, 0.4, 0.6, 0.8 s at 50 Hz
HORIZON = sum(BIN_FRAMES)
N_CLASSES = 2 ** (2 * len(BIN_FRAMES))
BIN_THRESHOLD = 0.5


# --- the CPC encoder ----------------------------------------------------------------------------


class ChannelNorm(nn.Module):
    """Normalise each frame over channels (unbiased variance), then a per-channel affine."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1, channels, 1))
        self.bias = nn.Parameter(torch.zeros(1, channels, 1))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(dim=1, keepdim=True)
        var = x.var(dim=1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class CPCEncoder(nn.Module):
    """gEncoder: waveform (B, 1, N) → (B, hidden, N / 160)."""

    SHAPES = ((10, 5, 3), (8, 4, 2), (4, 2, 1), (4, 2, 1), (4, 2, 1))  # (kernel, stride, padding)

    def __init__(self, hidden: int):
        super().__init__()
        for i, (kernel, stride, padding) in enumerate(self.SHAPES):
            setattr(self, f"conv{i}", nn.Conv1d(1 if i == 0 else hidden, hidden, kernel, stride=stride,
                                                padding=padding))
            setattr(self, f"batchNorm{i}", ChannelNorm(hidden))

    def forward(self, x: Tensor) -> Tensor:
        for i in range(len(self.SHAPES)):
            x = torch.relu(getattr(self, f"batchNorm{i}")(getattr(self, f"conv{i}")(x)))
        return x


class CPCAR(nn.Module):
    """gAR: a batch-first GRU or LSTM over the encoder's frames."""

    def __init__(self, kind: str, inputs: int, hidden: int, layers: int):
        super().__init__()
        rnn = {"GRU": nn.GRU, "LSTM": nn.LSTM}[kind]
        self.baseNet = rnn(inputs, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.baseNet(x)[0]


class CPC(nn.Module):
    def __init__(self, hidden: int, ar_kind: str, ar_hidden: int, ar_layers: int):
        super().__init__()
        self.gEncoder = CPCEncoder(hidden)
        self.gAR = CPCAR(ar_kind, hidden, ar_hidden, ar_layers)


class _Transpose(nn.Module):
    """(B, T, D) ↔ (B, D, T) (their einops Rearrange; no parameters)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.transpose(1, 2)


class _CausalConv1d(nn.Conv1d):
    """A convolution padded only on the left (kernel - 1 zeros): frame t sees samples up to t."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(nn.functional.pad(x, (self.kernel_size[0] - 1, 0)))


class _ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of (B, D, T) (their LayerNorm wrapper: the norm is `.ln`)."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.ln(x.transpose(1, 2)).transpose(1, 2)


class EncoderCPC(nn.Module):
    """One channel's waveform (B, N) → 50 Hz features (B, T, dim)."""

    def __init__(self, hidden: int, ar_kind: str, ar_hidden: int, ar_layers: int, dim: int):
        super().__init__()
        self.encoder = CPC(hidden, ar_kind, ar_hidden, ar_layers)
        self.dim = dim
        self.downsample = nn.Sequential(_Transpose(), _CausalConv1d(dim, dim, 5, stride=2), _ChannelLayerNorm(dim),
                                        nn.GELU(), _Transpose())

    def forward(self, waveform: Tensor) -> Tensor:
        z = self.encoder.gEncoder(waveform.unsqueeze(1)).transpose(1, 2)
        return self.downsample(self.encoder.gAR(z))


# --- the transformers ---------------------------------------------------------------------------


def alibi_slopes(n: int) -> list[float]:
    """ALiBi's head slopes (Press et al.; their get_slopes, non-powers of two included)."""
    def power_of_2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start ** i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


class MultiHeadAttentionAlibi(nn.Module):
    """Causal multi-head attention with ALiBi biases; no biases in the projections; the scores scaled
    by 1/sqrt(model dim) (theirs), not per head."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        if dim % num_heads:
            raise ModelError(f"VAP attention: dim {dim} is not a multiple of {num_heads} heads")
        self.num_heads, self.dim = num_heads, dim
        self.key = nn.Linear(dim, dim, bias=False)
        self.query = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.m = nn.Parameter(torch.tensor(alibi_slopes(num_heads)), requires_grad=False)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.dim // self.num_heads).transpose(1, 2)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        b, t, _ = q.shape
        scores = self._heads(self.query(q)) @ self._heads(self.key(k)).transpose(-1, -2) / math.sqrt(self.dim)
        positions = torch.arange(t, device=q.device, dtype=scores.dtype)
        bias = self.m.to(scores.dtype).view(1, -1, 1, 1) * positions.view(1, 1, 1, t)
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        scores = (scores + bias).masked_fill(future, float("-inf"))
        y = scores.softmax(dim=-1) @ self._heads(self.value(v))
        return self.proj(y.transpose(1, 2).reshape(b, t, self.dim))


class TransformerLayer(nn.Module):
    """Pre-LN layer: self-attention, (cross-attention to `src`), feed-forward (no biases)."""

    def __init__(self, dim: int, ffn_dim: int, num_heads: int, cross_attention: bool = False):
        super().__init__()
        self.ln_self_attn = nn.LayerNorm(dim)
        self.ln_ffnetwork = nn.LayerNorm(dim)
        self.mha = MultiHeadAttentionAlibi(dim, num_heads)
        self.ffnetwork = nn.Sequential(nn.Linear(dim, ffn_dim, bias=False), nn.GELU(), nn.Identity(),
                                       nn.Linear(ffn_dim, dim, bias=False))
        self.cross_attention = cross_attention
        if cross_attention:
            self.ln_src_attn = nn.LayerNorm(dim)
            self.mha_cross = MultiHeadAttentionAlibi(dim, num_heads)

    def forward(self, x: Tensor, src: Tensor | None = None) -> Tensor:
        z = self.ln_self_attn(x)
        x = x + self.mha(z, z, z)
        if self.cross_attention and src is not None:
            z = self.ln_src_attn(x)
            x = x + self.mha_cross(z, src, src)  # src not normalised (theirs)
        return x + self.ffnetwork(self.ln_ffnetwork(x))


class GPT(nn.Module):
    def __init__(self, dim: int, ffn_dim: int, num_layers: int, num_heads: int):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(dim, ffn_dim, num_heads) for _ in range(num_layers))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Combinator(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.h0_a = nn.Linear(dim, dim, bias=False)
        self.h0_b = nn.Linear(dim, dim, bias=False)
        self.ln = nn.LayerNorm(dim)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        gelu = nn.functional.gelu
        return gelu(self.ln(self.h0_a(x1))) + gelu(self.ln(self.h0_b(x2)))


class GPTStereo(nn.Module):
    def __init__(self, dim: int, ffn_dim: int, num_layers: int, num_heads: int):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(dim, ffn_dim, num_heads, cross_attention=True)
                                    for _ in range(num_layers))
        self.combinator = Combinator(dim)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        for layer in self.layers:
            x1, x2 = layer(x1, src=x2), layer(x2, src=x1)  # each from the other's input, as theirs
        return self.combinator(x1, x2)


class TransformerStereo(nn.Module):
    def __init__(self, dim: int, ffn_dim: int, self_layers: int, cross_layers: int, num_heads: int):
        super().__init__()
        self.ar_channel = GPT(dim, ffn_dim, self_layers, num_heads)
        self.ar = GPTStereo(dim, ffn_dim, cross_layers, num_heads)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return self.ar(self.ar_channel(x1), self.ar_channel(x2))


class ProjectionLayer(nn.Module):
    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.layer_norm = nn.LayerNorm(inputs)
        self.projection = nn.Linear(inputs, outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(self.layer_norm(x))


def code_vectors(n_bits: int = 2 * len(BIN_FRAMES)) -> Tensor:
    """Their Codebook's table: row i holds i's bits, least significant first."""
    i = torch.arange(2 ** n_bits).unsqueeze(1)
    return ((i >> torch.arange(n_bits)) & 1).float()


class _Codebook(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(N_CLASSES, 2 * len(BIN_FRAMES))
        self.emb.weight.data = code_vectors()
        self.emb.weight.requires_grad_(False)


class _Objective(nn.Module):
    def __init__(self):
        super().__init__()
        self.codebook = _Codebook()


class VAP(nn.Module):
    """waveform (B, 2, N) at 16 kHz → logits (B, T, 256) over the next 2 s's voice-activity states."""

    def __init__(self, encoder: EncoderCPC, transformer: TransformerStereo, dim: int, projection: bool):
        super().__init__()
        self.encoder = encoder
        self.transformer = transformer
        self.feature_projection = ProjectionLayer(encoder.dim, dim) if projection else nn.Identity()
        self.objective = _Objective()
        self.va_classifier = nn.Linear(dim, 1)
        self.vap_head = nn.Linear(dim, N_CLASSES)

    def forward(self, waveform: Tensor) -> Tensor:
        x1 = self.feature_projection(self.encoder(waveform[:, 0]))
        x2 = self.feature_projection(self.encoder(waveform[:, 1]))
        return self.vap_head(self.transformer(x1, x2))


# --- the released state dict ----------------------------------------------------------------------


def _count(sd: dict, prefix: str) -> int:
    n = 0
    while f"{prefix}.{n}.ln_self_attn.weight" in sd:
        n += 1
    return n


def build_from_state_dict(sd: dict[str, Tensor], name: str = "state dict") -> VAP:
    """A VAP of the sizes the state dict's shapes give, its weights loaded strictly (ModelError naming
    `name` for a missing or unexpected key, a shape that does not fit, or a codebook that is not theirs)."""
    for key, value in sd.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise ModelError(f"{name}: not a VAP state dict (entry {key!r} holds a {type(value).__name__}; "
                             "a state dict maps names to tensors)")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ModelError(f"{name}: {key} holds NaN or infinite values")
    if sd and all(k.startswith("model.") for k in sd):  # their VAPModule_state_dict.pt: the module's `model.`
        sd = {k[len("model."):]: v for k, v in sd.items()}
    try:
        hidden = sd["encoder.encoder.gEncoder.conv0.weight"].shape[0]
        gates, ar_hidden = sd["encoder.encoder.gAR.baseNet.weight_ih_l0"].shape[0], \
            sd["encoder.encoder.gAR.baseNet.weight_hh_l0"].shape[1]
        enc_dim = sd["encoder.downsample.1.weight"].shape[0]
        dim = sd["transformer.ar_channel.layers.0.ln_self_attn.weight"].shape[0]
        ffn_dim = sd["transformer.ar_channel.layers.0.ffnetwork.0.weight"].shape[0]
        heads = sd["transformer.ar_channel.layers.0.mha.m"].shape[0]
        classes = sd["vap_head.weight"].shape[0]
    except KeyError as error:
        raise ModelError(f"{name}: not a VAP state dict (no {error.args[0]!r}; expected the layout of the authors' "
                         "VAP_state_dict.pt)") from None
    except IndexError:
        raise ModelError(f"{name}: a tensor VAP's sizes are read from has no dimension (a 0-d tensor)") from None
    sizes = {"gEncoder conv0 channels": hidden, "gAR hidden size": ar_hidden, "encoder dim": enc_dim,
             "transformer dim": dim, "feed-forward dim": ffn_dim, "attention heads": heads}
    empty = [what for what, size in sizes.items() if size < 1]
    if empty:
        raise ModelError(f"{name}: its tensors give VAP a size of 0 ({', '.join(empty)})")
    kinds = {3 * ar_hidden: "GRU", 4 * ar_hidden: "LSTM"}
    if gates not in kinds:
        raise ModelError(f"{name}: gAR weight_ih_l0 has {gates} rows; a GRU has {3 * ar_hidden}, an LSTM "
                         f"{4 * ar_hidden}")
    if classes != N_CLASSES:
        raise ModelError(f"{name}: vap_head has {classes} classes; VAP's projection has {N_CLASSES} (2 speakers x "
                         f"{len(BIN_FRAMES)} bins)")
    ar_layers = sum(1 for k in sd if k.startswith("encoder.encoder.gAR.baseNet.weight_ih_l"))
    encoder = EncoderCPC(hidden, kinds[gates], ar_hidden, ar_layers, enc_dim)
    transformer = TransformerStereo(dim, ffn_dim, _count(sd, "transformer.ar_channel.layers"),
                                    _count(sd, "transformer.ar.layers"), heads)
    model = VAP(encoder, transformer, dim, "feature_projection.projection.weight" in sd)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as error:
        detail = " ".join(str(error).split())
        raise ModelError(f"{name}: the state dict does not fit VAP's layout ({detail[:400]})") from None
    if not torch.equal(model.objective.codebook.emb.weight.detach().cpu(), code_vectors()):
        raise ModelError(f"{name}: objective.codebook.emb.weight is not VAP's binary codebook")
    return model.eval()


def load_state_dict_file(path: str | Path) -> VAP:
    """A VAP from one state-dict file (tensors only: torch.load with weights_only)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as error:
        raise ModelError(f"{path}: cannot read a state dict ({error.strerror or error})") from None
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # torch.save's zip archive, or its legacy pickle
        raise ModelError(f"{path}: cannot read a state dict: not a file torch.save wrote (it starts with {head!r}; "
                         "a VAP state dict is the authors' VAP_state_dict.pt)")
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch reports a bad file with many error types
        raise ModelError(f"{path}: cannot read a state dict ({type(error).__name__}: {str(error)[:200]})") from None
    if not isinstance(sd, dict):
        raise ModelError(f"{path}: holds a {type(sd).__name__}, not a state dict")
    return build_from_state_dict(sd, str(path))


# --- labels and surprisal ------------------------------------------------------------------------


def future_labels(va: Tensor) -> Tensor:
    """Their objective's labels: va (T, 2) bool/float → (T - HORIZON,) state indices; frame t's state
    is the bins of va[t + 1 : t + 1 + HORIZON] (a bin active at >= BIN_THRESHOLD of its frames)."""
    va = va.float()
    window = va[1:].unfold(0, HORIZON, 1)  # (T - HORIZON, 2, HORIZON)
    bits, start = [], 0
    for size in BIN_FRAMES:
        bits.append(window[..., start:start + size].mean(-1) >= BIN_THRESHOLD)
        start += size
    active = torch.stack(bits, dim=-1).reshape(window.shape[0], -1).long()  # (T', speaker x bin)
    return (active << torch.arange(active.shape[1])).sum(-1)
