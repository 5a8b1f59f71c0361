"""ECAPA-TDNN speaker embeddings from a SpeechBrain model folder, in plain torch.

Folder: ``hyperparams.yaml`` (compute_features: Fbank, mean_var_norm, embedding_model: ECAPA_TDNN,
optional mean_var_norm_emb) and ``embedding_model.ckpt``, a state dict with SpeechBrain's names
(``blocks.0.conv.conv.weight``, ``mfa``, ``asp``, ``asp_bn``, ``fc``). Ragged batches are exact:
each "same" convolution reflect-pads every item at its own length, and the SE means and attentive
statistics pooling see only the item's frames, so a batch gives what each item gives alone
(SpeechBrain pads the batch and reflects across the padding: speechbrain#1374).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sdscore.checkpoint_files import (
    SizeRule,
    TensorInfo,
    check_finite,
    check_floats,
    check_sizes,
    load_torch_pickle,
)
from sdscore.errors import ModelError
from sdscore.features.cache import combine_digests, hash_file
from sdscore.features.speaker.speechbrain_layout import (
    Normalization,
    Tagged,
    fbank_from_hparams,
    find_tagged,
    normalization_from_hparams,
    read_hyperparams,
)

PIPELINE_VERSION = "ecapa-1"
_ACTIVATIONS = {"ReLU": torch.nn.ReLU, "LeakyReLU": torch.nn.LeakyReLU}


def reflect_index(lengths: torch.Tensor, pad: int, width: int) -> torch.Tensor:
    """Gather index [B, width + 2·pad] that reflect-pads each row at its own length (lengths [B] > pad)."""
    position = torch.arange(-pad, width + pad, device=lengths.device).abs()[None, :]
    last = (lengths - 1)[:, None]
    return torch.where(position > last, 2 * last - position, position).clamp(0, width - 1)


class Conv1d(torch.nn.Module):
    """SpeechBrain's Conv1d (padding "same", mode "reflect") on x [B, C, L] with lengths [B]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        if kernel_size % 2 == 0:
            raise ModelError(f"ECAPA kernel sizes must be odd, got {kernel_size}")
        self.conv = torch.nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.pad = dilation * (kernel_size - 1) // 2

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.pad:
            index = reflect_index(lengths, self.pad, x.shape[-1])
            x = x.gather(2, index[:, None, :].expand(-1, x.shape[1], -1))
        return self.conv(x)


class BatchNorm1d(torch.nn.Module):
    """SpeechBrain's BatchNorm1d wrapper (parameters under ``norm.``)."""

    def __init__(self, input_size: int):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(input_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class TDNNBlock(torch.nn.Module):
    """conv → activation → batch norm."""

    def __init__(self, in_channels, out_channels, kernel_size, dilation, activation=torch.nn.ReLU, groups=1):
        super().__init__()
        self.conv = Conv1d(in_channels, out_channels, kernel_size, dilation, groups)
        self.activation = activation()
        self.norm = BatchNorm1d(out_channels)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.conv(x, lengths)))


class Res2NetBlock(torch.nn.Module):
    """Hierarchical residual convolutions over `scale` channel groups."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int):
        super().__init__()
        if channels % scale:
            raise ModelError(f"ECAPA channels ({channels}) must be divisible by res2net_scale ({scale})")
        width = channels // scale
        self.blocks = torch.nn.ModuleList(TDNNBlock(width, width, kernel_size, dilation) for _ in range(scale - 1))
        self.scale = scale

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        outputs = []
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                y = part
            elif i == 1:
                y = self.blocks[0](part, lengths)
            else:
                y = self.blocks[i - 1](part + y, lengths)
            outputs.append(y)
        return torch.cat(outputs, dim=1)


class SEBlock(torch.nn.Module):
    """Squeeze-and-excitation with the squeeze (mean over time) taken over each item's frames."""

    def __init__(self, in_channels: int, se_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = Conv1d(in_channels, se_channels, 1)
        self.conv2 = Conv1d(se_channels, out_channels, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        s = (x * mask).sum(dim=2, keepdim=True) / mask.sum(dim=2, keepdim=True)
        s = torch.relu(self.conv1(s, lengths))
        return torch.sigmoid(self.conv2(s, lengths)) * x


class AttentiveStatisticsPooling(torch.nn.Module):
    """Attention-weighted mean and std over each item's frames: x [B, C, L] → [B, 2C]."""

    eps = 1e-12

    def __init__(self, channels: int, attention_channels: int, global_context: bool):
        super().__init__()
        self.global_context = global_context
        self.tdnn = TDNNBlock(channels * 3 if global_context else channels, attention_channels, 1, 1)
        self.conv = Conv1d(attention_channels, channels, 1)

    def _statistics(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (weights * x).sum(2)
        std = torch.sqrt((weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(self.eps))
        return mean, std

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        attn = x
        if self.global_context:
            mean, std = self._statistics(x, mask / mask.sum(dim=2, keepdim=True))
            width = x.shape[-1]
            attn = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, width), std.unsqueeze(2).repeat(1, 1, width)], dim=1)
        attn = self.conv(torch.tanh(self.tdnn(attn, lengths)), lengths)
        attn = F.softmax(attn.masked_fill(mask == 0, float("-inf")), dim=2)
        return torch.cat(self._statistics(x, attn), dim=1)


class SERes2NetBlock(torch.nn.Module):
    """TDNN → Res2Net → TDNN → SE, plus a residual (1×1 conv when the width changes)."""

    def __init__(self, in_channels, out_channels, res2net_scale, se_channels, kernel_size, dilation, activation, groups):
        super().__init__()
        self.tdnn1 = TDNNBlock(in_channels, out_channels, 1, 1, activation, groups)
        self.res2net_block = Res2NetBlock(out_channels, res2net_scale, kernel_size, dilation)
        self.tdnn2 = TDNNBlock(out_channels, out_channels, 1, 1, activation, groups)
        self.se_block = SEBlock(out_channels, se_channels, out_channels)
        self.shortcut = Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        residual = x if self.shortcut is None else self.shortcut(x, lengths)
        x = self.tdnn2(self.res2net_block(self.tdnn1(x, lengths), lengths), lengths)
        return self.se_block(x, mask, lengths) + residual


class EcapaTdnn(torch.nn.Module):
    """``speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN``: feats [B, T, F] + lengths [B] → embeddings [B, D]."""

    def __init__(self, input_size: int, lin_neurons: int = 192, activation=torch.nn.ReLU,
                 channels=(512, 512, 512, 512, 1536), kernel_sizes=(5, 3, 3, 3, 1), dilations=(1, 2, 3, 4, 1),
                 attention_channels: int = 128, res2net_scale: int = 8, se_channels: int = 128,
                 global_context: bool = True, groups=(1, 1, 1, 1, 1)):
        super().__init__()
        if not len(channels) == len(kernel_sizes) == len(dilations) == len(groups) or len(channels) < 3:
            raise ModelError(
                f"ECAPA channels, kernel_sizes, dilations and groups need one entry per layer (>= 3), got "
                f"{len(channels)}, {len(kernel_sizes)}, {len(dilations)}, {len(groups)}"
            )
        self.blocks = torch.nn.ModuleList(
            [TDNNBlock(input_size, channels[0], kernel_sizes[0], dilations[0], activation, groups[0])]
        )
        for i in range(1, len(channels) - 1):
            self.blocks.append(SERes2NetBlock(channels[i - 1], channels[i], res2net_scale, se_channels,
                                              kernel_sizes[i], dilations[i], activation, groups[i]))
        self.mfa = TDNNBlock(channels[-2] * (len(channels) - 2), channels[-1], kernel_sizes[-1], dilations[-1],
                             activation, groups[-1])
        self.asp = AttentiveStatisticsPooling(channels[-1], attention_channels, global_context)
        self.asp_bn = BatchNorm1d(channels[-1] * 2)
        self.fc = Conv1d(channels[-1] * 2, lin_neurons, 1)
        self.min_frames = 1 + max(m.pad for m in self.modules() if isinstance(m, Conv1d))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = feats.transpose(1, 2)
        mask = (torch.arange(x.shape[-1], device=x.device)[None, :] < lengths[:, None]).to(x.dtype)[:, None, :]
        x = self.blocks[0](x, lengths)
        hidden = []
        for block in self.blocks[1:]:
            x = block(x, mask, lengths)
            hidden.append(x)
        x = self.mfa(torch.cat(hidden, dim=1), lengths)
        x = self.asp_bn(self.asp(x, mask, lengths).unsqueeze(2))
        return self.fc(x, lengths).squeeze(2)


def _size_rules(spec: Tagged) -> list[SizeRule]:
    """hyperparams.yaml's ECAPA_TDNN sizes as the checkpoint's tensor shapes show them."""
    defaults = {k: p.default for k, p in inspect.signature(EcapaTdnn).parameters.items()}
    args = {**defaults, **spec.kwargs}
    rules = [
        SizeRule("embedding_model.input_size", args.get("input_size"), r"blocks\.0\.conv\.conv\.weight", 1),
        SizeRule("embedding_model.lin_neurons", args["lin_neurons"], r"fc\.conv\.weight", 0),
        SizeRule("embedding_model.attention_channels", args["attention_channels"], r"asp\.tdnn\.conv\.conv\.weight", 0),
    ]
    channels = args["channels"]
    if isinstance(channels, (list, tuple)) and len(channels) >= 3:
        rules.append(SizeRule("embedding_model.channels[0]", channels[0], r"blocks\.0\.conv\.conv\.weight", 0))
        rules += [SizeRule(f"embedding_model.channels[{i}]", channels[i], rf"blocks\.{i}\.tdnn1\.conv\.conv\.weight", 0)
                  for i in range(1, len(channels) - 1)]
        rules.append(SizeRule(f"embedding_model.channels[{len(channels) - 1}]", channels[-1], r"mfa\.conv\.conv\.weight", 0))
        rules.append(SizeRule("len(embedding_model.channels) - 1", len(channels) - 1, r"blocks\.(\d+)\..+", None))
    return rules


def _network_from_hparams(spec: Tagged, source: str) -> EcapaTdnn:
    args = {k: v for k, v in spec.kwargs.items() if k not in ("device", "dropout")}
    activation = args.pop("activation", None)
    if activation is not None:
        name = activation.target.rsplit(".", 1)[-1] if isinstance(activation, Tagged) else str(activation)
        if name not in _ACTIVATIONS:
            raise ModelError(f"{source}: unsupported ECAPA activation {name!r}; expected one of {sorted(_ACTIVATIONS)}")
        args["activation"] = _ACTIVATIONS[name]
    try:
        return EcapaTdnn(**args)
    except TypeError as error:
        raise ModelError(f"{source}: unsupported ECAPA_TDNN arguments: {error}") from error


class EcapaEncoder:
    """ECAPA-TDNN embeddings [N, D] of waveforms, batched by similar length (exact, see module doc)."""

    name = "ecapa"

    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu", normalize_embeddings: bool = False,
                 max_batch_frames: int = 4000):
        """normalize_embeddings applies mean_var_norm_emb (SpeechBrain's encode_batch default: off)."""
        folder = Path(model_dir)
        source = str(folder / "hyperparams.yaml")
        weights = folder / "embedding_model.ckpt"
        if not weights.is_file():
            raise ModelError(f"{folder}: no embedding_model.ckpt (expected a SpeechBrain ECAPA folder)")
        hparams = read_hyperparams(source)
        features = find_tagged(hparams, "compute_features", "Fbank", source)
        self.fbank = fbank_from_hparams(features, source)
        self.sample_rate = int(features.kwargs.get("sample_rate", 16000))
        self.feature_norm = self._normalization(hparams, "mean_var_norm", folder, source, ("normalizer.ckpt",))
        self.embedding_norm = (
            self._normalization(hparams, "mean_var_norm_emb", folder, source, ()) if normalize_embeddings else None
        )
        if normalize_embeddings and self.embedding_norm is None:
            raise ModelError(f"{source}: normalize_embeddings needs a mean_var_norm_emb entry")
        spec = find_tagged(hparams, "embedding_model", "ECAPA_TDNN", source)
        with torch.device("meta"):  # the arguments checked, nothing allocated
            _network_from_hparams(spec, source)
        state = load_torch_pickle(weights)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ModelError(f"{weights}: not a state dict of tensors (expected SpeechBrain's embedding_model.ckpt)")
        shapes = {name: TensorInfo(weights, str(value.dtype), tuple(value.shape)) for name, value in state.items()}
        # before the network is allocated: hyperparams.yaml's sizes against the checkpoint's shapes
        check_sizes(f"{weights}: does not fit the ECAPA_TDNN of {source}", _size_rules(spec), shapes)
        self.network = _network_from_hparams(spec, source)
        own = self.network.state_dict()
        check_floats(((k, v) for k, v in state.items() if k in own and own[k].is_floating_point()), weights)
        check_finite(state.items(), weights)
        try:
            self.network.load_state_dict(state)
        except (RuntimeError, TypeError, AttributeError) as error:
            raise ModelError(f"{weights}: does not fit the ECAPA_TDNN of hyperparams.yaml: {error}") from error
        self.device = torch.device(device)
        self.network.to(self.device).eval()
        self.fbank.to(self.device)
        self.dim = self.network.fc.conv.out_channels
        if max_batch_frames < 1:
            raise ValueError(f"max_batch_frames must be >= 1, got {max_batch_frames}")
        self.max_batch_frames = int(max_batch_frames)
        parts = [hash_file(weights), hash_file(source)]
        parts += [hash_file(f) for f in sorted(folder.glob("*.ckpt")) if "norm" in f.name]
        self.version = f"{PIPELINE_VERSION}-{int(normalize_embeddings)}-{combine_digests(parts)}"

    @staticmethod
    def _normalization(hparams: dict, key: str, folder: Path, source: str, aliases: tuple[str, ...]) -> Normalization | None:
        if key not in hparams:
            return None
        stats = next((folder / n for n in (f"{key}.ckpt", *aliases) if (folder / n).is_file()), None)
        return normalization_from_hparams(find_tagged(hparams, key, "InputNormalization", source), stats, source)

    def _features(self, wav: np.ndarray) -> torch.Tensor:
        """Normalised log-mel features [T, n_mels] of one wave (ValueError if unusable)."""
        if len(wav) == 0:
            raise ValueError("audio is empty")
        if not np.isfinite(wav).all():
            raise ValueError("audio holds NaN or Inf samples")
        feats = self.fbank(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)).to(self.device))
        if feats.shape[0] < self.network.min_frames:
            raise ValueError(
                f"audio too short for ECAPA: {feats.shape[0]} frames, needs >= {self.network.min_frames}"
            )
        return feats if self.feature_norm is None else self.feature_norm(feats)

    @torch.no_grad()
    def embed_waveforms(self, waves: Sequence[np.ndarray]) -> tuple[np.ndarray, list[str | None]]:
        """Embeddings [N, D] (float32; NaN rows where errors[i] is set), shortest items batched first."""
        out = np.full((len(waves), self.dim), np.nan, dtype=np.float32)
        errors: list[str | None] = [None] * len(waves)
        feats: dict[int, torch.Tensor] = {}
        for i, wav in enumerate(waves):
            try:
                feats[i] = self._features(np.asarray(wav, dtype=np.float32))
            except ValueError as error:
                errors[i] = str(error)
        order = sorted(feats, key=lambda i: feats[i].shape[0])
        start = 0
        while start < len(order):
            stop = start + 1
            while stop < len(order) and (stop - start + 1) * feats[order[stop]].shape[0] <= self.max_batch_frames:
                stop += 1
            batch = [feats[i] for i in order[start:stop]]
            lengths = torch.tensor([f.shape[0] for f in batch], device=self.device)
            padded = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
            embeddings = self.network(padded, lengths)
            if self.embedding_norm is not None:
                embeddings = self.embedding_norm(embeddings)
            out[order[start:stop]] = embeddings.float().cpu().numpy()
            start = stop
        return out, errors
