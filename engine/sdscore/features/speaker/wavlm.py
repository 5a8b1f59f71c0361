"""WavLM x-vector speaker embeddings (e.g. microsoft/wavlm-base-plus-sv) from a local HF folder.

transformers' ``WavLMForXVector`` with ``Wav2Vec2FeatureExtractor``; nothing is downloaded. Batches
are zero-padded with an attention mask, which the encoder and the x-vector statistics pooling
honour. Models whose first convolution uses GroupNorm over time (``feat_extract_norm="group"``,
as WavLM Base+) would normalise over the padding, so that norm is swapped for one that
normalises each item over its own frames: a batch then gives what each item gives alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from sdscore.checkpoint_files import (
    LIBRARY_LOAD_ERRORS,
    SizeRule,
    check_finite,
    check_float_weights,
    check_sizes,
    read_config_json,
    refusing_unsafe_pickles,
    tensor_in,
    tensor_index,
    weight_files,
)
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.features.cache import combine_digests, hash_file

PIPELINE_VERSION = "wavlm-1"
_MODEL_FILES = ("config.json", "preprocessor_config.json", "model.safetensors", "pytorch_model.bin")


class ItemGroupNorm(torch.nn.Module):
    """Per-channel GroupNorm over each item's first ``lengths[b]`` frames: x [B, C, L] → [B, C, L]."""

    def __init__(self, norm: torch.nn.GroupNorm):
        super().__init__()
        if norm.num_groups != norm.num_channels or not norm.affine:
            raise ModelError("only a per-channel affine GroupNorm can be made length-aware")
        self.norm = norm
        self.lengths: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.lengths is None:
            return self.norm(x)
        mask = (torch.arange(x.shape[-1], device=x.device)[None, :] < self.lengths[:, None]).to(x.dtype)[:, None, :]
        count = self.lengths.to(x.dtype)[:, None, None]
        mean = (x * mask).sum(-1, keepdim=True) / count
        var = ((x - mean).square() * mask).sum(-1, keepdim=True) / count
        scaled = (x - mean) * torch.rsqrt(var + self.norm.eps)
        return scaled * self.norm.weight[None, :, None] + self.norm.bias[None, :, None]


def _transformers():
    try:
        import transformers
    except ImportError as error:
        raise MissingDependencyError("the WavLM embedder needs transformers: pip install transformers") from error
    return transformers


class WavlmEncoder:
    """WavLMForXVector embeddings [N, D] of 16 kHz waveforms, batched by similar length (exact)."""

    name = "wavlm"

    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu", max_batch_samples: int = 32 * 16000):
        folder = Path(model_dir)
        if not (folder / "config.json").is_file():
            raise ModelError(f"{folder}: no config.json (expected a Hugging Face WavLMForXVector folder)")
        config = read_config_json(folder)
        index = tensor_index(weight_files(folder))  # headers only: checked before anything is allocated
        check_float_weights(index)
        check_sizes(folder / "config.json", [
            SizeRule("hidden_size", config.get("hidden_size"), r"(?:wavlm\.)?feature_projection\.projection\.weight", 0),
            SizeRule("intermediate_size", config.get("intermediate_size"),
                     r"(?:wavlm\.)?encoder\.layers\.0\.feed_forward\.intermediate_dense\.weight", 0),
            SizeRule("num_hidden_layers", config.get("num_hidden_layers"), r"(?:wavlm\.)?encoder\.layers\.(\d+)\..+", None),
        ], index)
        transformers = _transformers()
        try:
            with refusing_unsafe_pickles(folder):
                self.model = transformers.WavLMForXVector.from_pretrained(folder, local_files_only=True)
        except LIBRARY_LOAD_ERRORS as error:
            raise ModelError(f"{folder}: cannot load WavLMForXVector: {error}") from error
        check_finite(self.model.named_parameters(), tensor_in(index, folder))
        if (folder / "preprocessor_config.json").is_file():
            self.extractor = transformers.Wav2Vec2FeatureExtractor.from_pretrained(folder, local_files_only=True)
        else:
            self.extractor = transformers.Wav2Vec2FeatureExtractor(sampling_rate=16000)
        self.sample_rate = int(self.extractor.sampling_rate)
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        first = self.model.wavlm.feature_extractor.conv_layers[0]
        self._item_norm = None
        if isinstance(getattr(first, "layer_norm", None), torch.nn.GroupNorm):
            self._item_norm = first.layer_norm = ItemGroupNorm(first.layer_norm)
        self._first_conv = first.conv
        self.dim = int(self.model.config.xvector_output_dim)
        if max_batch_samples < 1:
            raise ValueError(f"max_batch_samples must be >= 1, got {max_batch_samples}")
        self.max_batch_samples = int(max_batch_samples)
        digests = [hash_file(folder / name) for name in _MODEL_FILES if (folder / name).is_file()]
        self.version = f"{PIPELINE_VERSION}-{combine_digests(digests)}"

    def _input_values(self, wav: np.ndarray) -> np.ndarray:
        """The extractor's input values [S] for one wave (ValueError if unusable)."""
        if not np.isfinite(wav).all():
            raise ValueError("audio holds NaN or Inf samples")
        frames = self.model._get_feat_extract_output_lengths(torch.tensor(len(wav)))
        if len(wav) < self._first_conv.kernel_size[0] or int(self.model._get_tdnn_output_lengths(frames)) < 2:
            raise ValueError(f"audio too short for WavLM: {len(wav)} samples")
        values = self.extractor(wav, sampling_rate=self.sample_rate, return_tensors="np")["input_values"][0]
        return np.asarray(values, dtype=np.float32)

    @torch.no_grad()
    def embed_waveforms(self, waves: Sequence[np.ndarray]) -> tuple[np.ndarray, list[str | None]]:
        """Embeddings [N, D] (float32; NaN rows where errors[i] is set), shortest items batched first."""
        out = np.full((len(waves), self.dim), np.nan, dtype=np.float32)
        errors: list[str | None] = [None] * len(waves)
        values: dict[int, np.ndarray] = {}
        for i, wav in enumerate(waves):
            try:
                values[i] = self._input_values(np.asarray(wav, dtype=np.float32))
            except ValueError as error:
                errors[i] = str(error)
        order = sorted(values, key=lambda i: len(values[i]))
        start = 0
        while start < len(order):
            stop = start + 1
            while stop < len(order) and (stop - start + 1) * len(values[order[stop]]) <= self.max_batch_samples:
                stop += 1
            out[order[start:stop]] = self._forward([values[i] for i in order[start:stop]])
            start = stop
        return out, errors

    def _forward(self, batch: list[np.ndarray]) -> np.ndarray:
        """x-vectors [B, D] of input values of ascending length, padded and masked."""
        lengths = torch.tensor([len(v) for v in batch], device=self.device)
        padded = torch.zeros(len(batch), int(lengths.max()), device=self.device)
        for row, v in enumerate(batch):
            padded[row, : len(v)] = torch.from_numpy(v)
        mask = (torch.arange(padded.shape[1], device=self.device)[None, :] < lengths[:, None]).long()
        if self._item_norm is not None:
            kernel, stride = self._first_conv.kernel_size[0], self._first_conv.stride[0]
            self._item_norm.lengths = torch.div(lengths - kernel, stride, rounding_mode="floor") + 1
        try:
            embeddings = self.model(padded, attention_mask=mask).embeddings
        finally:
            if self._item_norm is not None:
                self._item_norm.lengths = None
        return embeddings.float().cpu().numpy()
