"""The compact built-in reward model: log-mel + UTF-8 bytes → a small transformer → mean pool → reward.

One interleaved sequence per episode, the same shape as SDiaReward's multimodal LM input at toy
scale: [criterion] then per turn [role][text tokens][audio tokens][turn end]. A text token is
a patch of `bytes_per_token` UTF-8 bytes (byte_tokens.py); an audio token is `frames_per_token`
log-mel frames stacked (10 ms hop, so 8 frames = 80 ms, 12.5 tokens/s). Patching both keeps an
episode of ~20 s of speech and ~300 characters near 300 positions, so CPU training stays cheap.

`prepare` (CPU, per episode) does all the data-dependent work: the log-mel, the layout and the
truncation. `hidden` is tensor ops only — an embedding, one Linear over the stacked frames,
positions counted from the mask (so left and right padding give the same states), pre-LN blocks
over torch SDPA. `collate` packs the frames of a batch's audio positions ([N, F], scattered into
place in `hidden`), so no zero rows for text and padding are written, moved or projected;
`collate_dense` lays them out [B, L, F] (selected by `where`), the fixed-rank form that exports to
ONNX / TensorRT. Both give the same states.

Truncation keeps the END of an episode: when the sequence is longer than `max_len`, the
criterion token stays first and the oldest tokens after it are dropped (the candidate final turn
is what the reward judges). Each clip is first cut to `max_clip_seconds` (its start is kept).

On disk: `sdscore_reward.json` (kind, version, every hyperparameter, a free-form "card") and
`model.safetensors`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from sdscore.atomic_write import atomic_path, write_json
from sdscore.checkpoint_files import (
    SizeRule,
    check_sizes,
    check_state,
    check_state_fits,
    missing_safetensors,
    read_json,
    read_safetensors,
    resolve_device,
    resolve_dtype,
    safetensors_header,
)
from sdscore.errors import AudioError, ModelError, SdscoreError
from sdscore.kernels import gelu_, span_attention
from sdscore.models import byte_tokens as bt
from sdscore.models.base import Prepared, RewardModel
from sdscore.models.episodes import Episode
from sdscore.models.heads import Pooler, pooling_name
from sdscore.models.log_mel import stacked_log_mel_many

CONFIG_FILE = "sdscore_reward.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1
LOAD_OPTIONS = ("padding_side", "device", "dtype")
#: models that ship inside the package (trained by bench/train_demo_model.py)
BUNDLED_DIR = Path(__file__).resolve().parent / "pretrained"
DEFAULT_BUNDLED = "compact-synth"


def bundled_model_dir(name: str = DEFAULT_BUNDLED) -> Path:
    """The folder of a model shipped with sdscore (e.g. "compact-synth", the demo model)."""
    folder = BUNDLED_DIR / name
    if not (folder / CONFIG_FILE).is_file():
        found = sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / CONFIG_FILE).is_file()) if BUNDLED_DIR.is_dir() else []
        raise ModelError(f"no bundled reward model {name!r}; bundled: {found}")
    return folder


@dataclass(frozen=True)
class CompactConfig:
    """Hyperparameters of the compact model (all written to sdscore_reward.json)."""

    sample_rate: int = 16000
    n_fft: int = 400  # 25 ms window
    hop_length: int = 160  # 10 ms hop
    n_mels: int = 64
    fmin: float = 0.0
    fmax: float = 8000.0
    top_db: float = 80.0
    frames_per_token: int = 8  # 80 ms per audio token
    bytes_per_token: int = 4  # UTF-8 bytes per text token
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    ff_size: int = 192
    dropout: float = 0.1
    max_len: int = 1024  # tokens per episode; longer episodes keep their end
    max_clip_seconds: float = 30.0  # each clip is cut to its first max_clip_seconds
    pooling: str = "mean"
    padding_side: str = "right"

    def __post_init__(self) -> None:
        for name in ("sample_rate", "n_fft", "hop_length", "n_mels", "frames_per_token", "bytes_per_token", "d_model",
                     "n_layers", "n_heads", "ff_size", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"compact config: {name} must be a positive integer, got {value!r}")
        if self.d_model % (2 * self.n_heads):
            raise ValueError(f"compact config: d_model {self.d_model} must be a multiple of 2 * n_heads ({2 * self.n_heads})")
        if self.max_len < 2:
            raise ValueError(f"compact config: max_len must be >= 2, got {self.max_len}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"compact config: dropout must be in [0, 1), got {self.dropout}")
        if not self.max_clip_seconds > 0:
            raise ValueError(f"compact config: max_clip_seconds must be > 0, got {self.max_clip_seconds}")
        if not 0.0 <= self.fmin < self.fmax <= self.sample_rate / 2:
            raise ValueError(f"compact config: need 0 <= fmin < fmax <= sample_rate/2, got {self.fmin}, {self.fmax}")
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"compact config: padding_side must be 'left' or 'right', got {self.padding_side!r}")
        object.__setattr__(self, "pooling", pooling_name(self.pooling))

    @property
    def frame_size(self) -> int:
        """Width of one audio token's features: frames_per_token × n_mels."""
        return self.frames_per_token * self.n_mels

    @staticmethod
    def from_dict(values: dict[str, Any]) -> CompactConfig:
        """A config from JSON values; ValueError naming unknown keys."""
        known = {f.name for f in fields(CompactConfig)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown compact config keys {unknown}")
        return CompactConfig(**values)


class _Block(nn.Module):
    """Pre-LN transformer block: x + attn(LN(x)), then x + FF(LN(x)); attention by torch SDPA."""

    def __init__(self, d_model: int, n_heads: int, ff_size: int, dropout: float):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ff_size)
        self.ff2 = nn.Linear(ff_size, d_model)

    def forward(self, x: torch.Tensor, attend: torch.Tensor, spans: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x [B, L, D]; attend [B, 1, 1, L] bool (True = a key that may be attended). With `spans`
        (starts, lengths [B]: each row's attended positions, one run) attention runs in
        sdscore.kernels.span_attention (the compiled core on the CPU) instead of torch SDPA, and
        outside training and autograd the whole block takes the fused path of `_infer`."""
        if spans is not None and not self.training and not torch.is_grad_enabled():
            return self._infer(x, spans)
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x))
        p = self.dropout if self.training else 0.0
        if spans is not None:
            a = span_attention(qkv.view(b, n, 3, self.n_heads, d // self.n_heads), *spans).view(b, n, d)
        else:
            q, k, v = qkv.reshape(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
            # no dropout on the attention probabilities: drawing a [B, H, L, L] mask dominates a CPU step
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend).transpose(1, 2).reshape(b, n, d)
        x = x + F.dropout(self.out(a), p, self.training)
        h = F.dropout(F.gelu(self.ff1(self.norm2(x))), p, self.training)
        return x + F.dropout(self.ff2(h), p, self.training)

    def _infer(self, x: torch.Tensor, spans: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """forward() for inference with span attention, with fewer passes over memory: each residual
        Linear accumulates its GEMM into (x + bias) in place (torch's addmm would first copy the
        bias into a fresh output, then add x in another pass), and ff1's bias rides in the
        compiled GELU. Equal to forward() up to float rounding."""
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x))
        a = span_attention(qkv.view(b, n, 3, self.n_heads, d // self.n_heads), *spans).view(-1, d)
        x = (x.reshape(-1, d) + self.out.bias).addmm_(a, self.out.weight.t())
        h = gelu_(torch.mm(self.norm2(x), self.ff1.weight.t()), self.ff1.bias)
        return (x + self.ff2.bias).addmm_(h, self.ff2.weight.t()).view(b, n, d)

    def infer_packed(self, x: torch.Tensor, rows: PackedRows) -> torch.Tensor:
        """_infer over the fused forward's working rows x [W, D] (the batch's T tokens, or the cells
        of its attention grid: see PackedRows.on_grid); attention in one compiled-core call."""
        qkv = torch.addmm(self.qkv.bias, self.norm1(x), self.qkv.weight.t())
        a = rows.attention(qkv, self.n_heads)
        x = (x + self.out.bias).addmm_(a, self.out.weight.t())
        h = gelu_(torch.mm(self.norm2(x), self.ff1.weight.t()), self.ff1.bias)
        return (x + self.ff2.bias).addmm_(h, self.ff2.weight.t())


class CompactRewardModel(RewardModel):
    """Small interleaved byte+log-mel transformer with SDiaReward's pooler and score head."""

    kind: ClassVar[str] = "compact"

    def __init__(self, config: CompactConfig | None = None, card: dict[str, Any] | None = None):
        super().__init__()
        self.config = config or CompactConfig()
        self.card: dict[str, Any] = dict(card or {})
        self.sample_rate = self.config.sample_rate
        self.padding_side = self.config.padding_side
        c = self.config
        # Built on the meta device (the weight-file check of from_dir), nothing is computed: normal_
        # or arange on a meta tensor runs torch's Python reference, which imports torch._dynamo (~1.4 s
        # of a `score reward` start-up).
        meta = torch.get_default_device().type == "meta"
        self.embed = _embedding(c.bytes_per_token * bt.VOCAB_SIZE, c.d_model, meta)  # one table per patch slot
        self.segment = _embedding(bt.N_SEGMENTS, c.d_model, meta)
        self.frame_proj = nn.Linear(c.frame_size, c.d_model)
        self.blocks = nn.ModuleList(_Block(c.d_model, c.n_heads, c.ff_size, c.dropout) for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model)
        self.pooler = Pooler(c.pooling, c.d_model)
        self.score_head = nn.Linear(c.d_model, 1, bias=False)
        if meta:  # shapes only (arange on the meta device takes the same _dynamo import)
            inv_freq = torch.empty(c.d_model // 2)
            slot_offset = torch.empty(c.bytes_per_token, dtype=torch.int64)
        else:
            inv_freq = torch.exp(torch.arange(0, c.d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / c.d_model))
            slot_offset = torch.arange(c.bytes_per_token, dtype=torch.int64) * bt.VOCAB_SIZE
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("slot_offset", slot_offset, persistent=False)
        if not meta:
            self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    @classmethod
    def from_config(cls, config: CompactConfig | None = None, seed: int = 0, card: dict[str, Any] | None = None):
        """A freshly initialised model; the same seed gives the same weights (global RNG untouched)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(config, card)
        return model.eval()

    @property
    def max_clip_seconds(self) -> float:
        return float(self.config.max_clip_seconds)

    # --- CPU side -------------------------------------------------------------------------

    def _as_wave(self, wave: Any, where: str) -> np.ndarray | None:
        """A clip as 1-D float32 cut to max_clip_seconds (None stays None), not yet checked for
        NaN/Inf; AudioError if it is not one waveform."""
        if wave is None:
            return None
        if hasattr(wave, "detach"):  # a torch tensor from an RL loop
            wave = wave.detach().cpu().numpy()
        wave = np.asarray(wave, dtype=np.float32)
        if wave.ndim != 1:
            raise AudioError(f"{where}: audio must be a mono 1-D waveform, got shape {wave.shape}")
        return wave[: int(round(self.config.max_clip_seconds * self.config.sample_rate))]

    @staticmethod
    def _check_finite(wave: np.ndarray, where: str) -> None:
        if not np.isfinite(wave).all():
            raise AudioError(f"{where}: audio has NaN or Inf samples")

    def _checked_wave(self, wave: Any, where: str) -> np.ndarray | None:
        """_as_wave, then AudioError if the clip has NaN or Inf samples."""
        wave = self._as_wave(wave, where)
        if wave is not None:
            self._check_finite(wave, where)
        return wave

    def _stacked(self, waves: list[np.ndarray], transform=None) -> list[np.ndarray]:
        c = self.config
        return stacked_log_mel_many(waves, c.sample_rate, c.n_fft, c.hop_length, c.n_mels, c.fmin, c.fmax,
                                    c.top_db, c.frames_per_token, transform)

    def _project_frames(self, frames: np.ndarray) -> np.ndarray:
        """frame_proj of stacked log-mel rows [n, F] → float32 [n, d_model] (no autograd)."""
        weight = self.frame_proj.weight
        with torch.inference_mode():
            x = torch.from_numpy(frames).to(weight.dtype)
            return self.frame_proj(x).float().numpy()

    def audio_tokens(self, wave: Any, where: str = "") -> np.ndarray:
        """float32 [n_tokens, frames_per_token * n_mels]: stacked log-mel of one clip (None → none)."""
        wave = self._checked_wave(wave, where)
        if wave is None:
            return np.zeros((0, self.config.frame_size), dtype=np.float32)
        return self._stacked([wave])[0]

    def prepare(self, episode: Episode, audio: Sequence[Any]) -> Prepared:
        """Token ids [n, bytes_per_token], segment ids [n] and stacked log-mel [n_audio, F] of one
        episode, truncated to max_len tokens by keeping the end."""
        item = self.prepare_many([episode], [audio])[0]
        if isinstance(item, Exception):
            raise item
        return item

    def prepare_many(self, episodes: Sequence[Episode], audio: Sequence[Sequence[Any]],
                     inference: bool = False) -> list[Prepared | Exception]:
        """prepare() of many episodes with one batched log-mel front end over all of their clips
        (equal to clip-by-clip features; a bad episode's slot holds its error).

        inference=True (the scorer's torch path) with the weights on the CPU also runs the frame
        projection here, once per distinct clip: items then hold "audio_embeds" [n_audio, d_model]
        instead of "audio_frames" [n_audio, F] — a pair's shared context is projected once, and
        8x less data is concatenated per episode and per batch. hidden() takes either."""
        out: list[Prepared | Exception | None] = [None] * len(episodes)
        # A clip shared by several episodes (a pair's common context, the same array passed twice)
        # is checked and featurised once: the same memory, length and stride is the same clip.
        distinct: list[np.ndarray] = []
        index: dict[tuple[int, int, int], int] = {}

        def slot(wave: Any, where: str) -> int | None:
            """The checked clip's position in `distinct` (None: the turn has no audio)."""
            w = self._as_wave(wave, where)
            if w is None:
                return None
            key = (w.__array_interface__["data"][0], w.shape[0], w.strides[0])
            if key not in index:
                self._check_finite(w, where)
                index[key] = len(distinct)
                distinct.append(w)
            return index[key]

        slots: dict[int, list[int | None]] = {}
        for e, (episode, waves) in enumerate(zip(episodes, audio)):
            try:
                if len(waves) != len(episode.turns):
                    raise ValueError(f"episode {episode.id or '?'}: {len(episode.turns)} turns but {len(waves)} audio slots")
                slots[e] = [slot(w, f"episode {episode.id or '?'} turn {t}") for t, w in enumerate(waves)]
            except (SdscoreError, ValueError) as error:
                out[e] = error
        embed = inference and self.frame_proj.weight.device.type == "cpu"
        stacked = self._stacked(distinct, self._project_frames if embed else None)
        key, width = ("audio_embeds", self.config.d_model) if embed else ("audio_frames", self.config.frame_size)
        no_audio = np.zeros((0, width), np.float32)
        for e, turn_slots in slots.items():
            try:
                out[e] = self._assemble(episodes[e], [no_audio if u is None else stacked[u] for u in turn_slots], key)
            except (SdscoreError, ValueError) as error:
                out[e] = error
        return out

    def _assemble(self, episode: Episode, clips: list[np.ndarray], key: str = "audio_frames") -> Prepared:
        """The interleaved sequence of one episode from its clips' stacked log-mel (key
        "audio_frames") or their projections ("audio_embeds"): per turn [role][text patches]
        [one AUDIO token per stacked frame][turn end], after the criterion."""
        p = self.config.bytes_per_token
        texts = [turn.text.encode("utf-8") if turn.text else b"" for turn in episode.turns]
        lengths = [1] + [2 + -(-len(text) // p) + len(clip) for text, clip in zip(texts, clips)]
        ids = np.full((sum(lengths), p), bt.PAD, dtype=np.int64)
        flat, first = ids.reshape(-1), ids[:, 0]
        first[0] = bt.criterion_id(episode.criterion)
        at = 1
        for turn, text, clip, length in zip(episode.turns, texts, clips, lengths[1:]):
            first[at] = bt.role_id(turn.role)
            flat[(at + 1) * p : (at + 1) * p + len(text)] = np.frombuffer(text, dtype=np.uint8)
            first[at + length - 1 - len(clip) : at + length - 1] = bt.AUDIO
            first[at + length - 1] = bt.TURN_END
            at += length
        turn_segments = [bt.SEGMENT_CONTEXT] * (len(clips) - 1) + [bt.SEGMENT_FINAL] if clips else []
        seg = np.repeat(np.array([bt.SEGMENT_CRITERION, *turn_segments], dtype=np.int64), lengths)
        width = self.config.d_model if key == "audio_embeds" else self.config.frame_size
        stacked = np.concatenate(clips) if clips else np.zeros((0, width), np.float32)
        excess = len(ids) - self.config.max_len
        if excess > 0:  # keep the criterion token and the last max_len - 1 tokens
            dropped_audio = int(np.count_nonzero(ids[1 : 1 + excess, 0] == bt.AUDIO))
            ids = np.concatenate([ids[:1], ids[1 + excess :]])
            seg = np.concatenate([seg[:1], seg[1 + excess :]])
            stacked = stacked[dropped_audio:]
        return Prepared(len(ids), {"token_ids": ids, "segment_ids": seg, key: stacked})

    def _padded_ids(self, items: Sequence[Prepared]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """token_ids [B, L, P], segment_ids and attention_mask [B, L] padded on padding_side, and
        each row's first position."""
        if not items:
            raise ValueError("collate needs at least one prepared episode")
        n = len(items)
        width = max(max(it.length for it in items), 1)
        ids = np.full((n, width, self.config.bytes_per_token), bt.PAD, dtype=np.int64)
        seg = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        starts = []
        for b, item in enumerate(items):
            start = width - item.length if self.padding_side == "left" else 0
            span = slice(start, start + item.length)
            ids[b, span] = item.inputs["token_ids"]
            seg[b, span] = item.inputs["segment_ids"]
            mask[b, span] = 1
            starts.append(start)
        return ids, seg, mask, starts

    @staticmethod
    def _audio_key(items: Sequence[Prepared]) -> str:
        """The audio input key of a batch: items prepared with inference=True hold "audio_embeds",
        others "audio_frames"; a mix is refused."""
        keys = {"audio_embeds" if "audio_embeds" in item.inputs else "audio_frames" for item in items}
        if len(keys) > 1:
            raise ValueError("collate: a batch mixes items prepared with and without inference=True")
        return keys.pop() if keys else "audio_frames"

    def collate(self, items: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """token_ids int64 [B, L, bytes_per_token]; segment_ids, attention_mask int64 [B, L];
        audio_frames float32 [N, F]: the stacked log-mel of every AUDIO position of the batch, in
        row-major order of those positions (packed: no zero rows for text and padding to write,
        move and project) — or audio_embeds float32 [N, d_model], their projections, for items
        prepared with inference=True. collate_dense gives the batch with audio_frames [B, L, F]."""
        ids, seg, mask, _ = self._padded_ids(items)
        key = self._audio_key(items)
        audio = np.concatenate([item.inputs[key] for item in items])
        return {
            "token_ids": torch.from_numpy(ids),
            "segment_ids": torch.from_numpy(seg),
            "attention_mask": torch.from_numpy(mask),
            key: torch.from_numpy(audio),
        }

    def collate_dense(self, items: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """collate() with audio_frames float32 [B, L, F] (zeros except at audio positions): the
        fixed-rank layout the ONNX / TensorRT exports take (items prepared without inference)."""
        if self._audio_key(items) != "audio_frames":
            raise ValueError("collate_dense needs items prepared with inference=False (the exported graph "
                             "takes log-mel frames, not their projections)")
        ids, seg, mask, starts = self._padded_ids(items)
        frames = np.zeros((*mask.shape, self.config.frame_size), dtype=np.float32)
        for b, (item, start) in enumerate(zip(items, starts)):
            frames[b, start + np.flatnonzero(item.inputs["token_ids"][:, 0] == bt.AUDIO)] = item.inputs["audio_frames"]
        return {
            "token_ids": torch.from_numpy(ids),
            "segment_ids": torch.from_numpy(seg),
            "attention_mask": torch.from_numpy(mask),
            "audio_frames": torch.from_numpy(frames),
        }

    # --- device side ----------------------------------------------------------------------

    def hidden(self, batch: dict[str, torch.Tensor], attention: str = "sdpa") -> tuple[torch.Tensor, torch.Tensor]:
        """Last layer [B, L, D] and the attention mask [B, L]; audio_frames packed [N, F] (collate) or
        dense [B, L, F] (collate_dense: dense ops only, exportable), or audio_embeds [N, D] already
        projected (collate of items prepared with inference=True). attention="span" runs the
        blocks' attention through sdscore.kernels.span_attention when every row's mask is one run
        of positions (as collate lays it out), SDPA otherwise; the states agree to ~1e-6."""
        if attention not in ("sdpa", "span"):
            raise ValueError(f"attention must be 'sdpa' or 'span', got {attention!r}")
        ids, mask = batch["token_ids"], batch["attention_mask"]
        keep = mask != 0
        is_audio = (ids[..., 0] == bt.AUDIO)[..., None]
        dtype = self.frame_proj.weight.dtype
        if "audio_embeds" in batch:  # projected at prepare time, packed [N, D]
            audio, packed = batch["audio_embeds"].to(dtype), True
        else:
            frames = batch["audio_frames"]
            audio, packed = self.frame_proj(frames.to(dtype)), frames.dim() == 2
        text = self.embed(ids + self.slot_offset).sum(2)  # [B, L, P, D] → [B, L, D]
        if packed:  # [N, ·] (collate): fill the audio positions in row-major order
            x = text.masked_scatter(is_audio, audio)
        else:  # dense [B, L, F] (collate_dense, the exported graph)
            x = torch.where(is_audio, audio, text)
        x = x + self.segment(batch["segment_ids"])
        position = (keep.to(torch.int64).cumsum(1) - 1).clamp_min(0)
        angle = position[..., None].to(torch.float32) * self.inv_freq.float()
        x = x + torch.cat([angle.sin(), angle.cos()], dim=-1).to(x.dtype)
        x = F.dropout(x, self.config.dropout, self.training)
        attend = keep[:, None, None, :]
        spans = _spans(keep) if attention == "span" else None
        for block in self.blocks:
            x = block(x, attend, spans)
        return self.norm(x), mask

    def inference_pooled(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """pooled() for scoring: outside training and autograd, in float32 on the CPU, attention
        runs in the compiled core (span attention: no compute on padding, ~2x torch's CPU flash
        kernel at head size 16); elsewhere (GPU, bf16, training) SDPA as in pooled()."""
        weight = self.frame_proj.weight
        fast = not self.training and not torch.is_grad_enabled() and weight.device.type == "cpu" and weight.dtype == torch.float32
        if fast:
            rows = PackedRows.of(batch["attention_mask"])
            if rows is not None and (batch.get("audio_frames") is None or batch["audio_frames"].dim() == 2):
                return self.packed_pooled(batch, rows)
        hidden, mask = self.hidden(batch, attention="span" if fast else "sdpa")
        return self.pooler(hidden, mask).float()

    def packed_pooled(self, batch: dict[str, torch.Tensor], rows: PackedRows) -> torch.Tensor:
        """The fused CPU forward (float32, no autograd) that inference_pooled runs: every op on the
        batch's T tokens [T, D] instead of the padded [B, L, D] (or, when the batch has little
        padding, on its right-aligned grid's cells: see PackedRows.on_grid) — the token, segment
        and position rows gathered once (positions from a cached sinusoid table instead of sin/cos
        per call), the blocks' GEMMs, norms and GELU over those rows, attention in one compiled-core
        call per layer, then the pooler over the packed rows. Equal to hidden(attention="span") +
        the pooler up to float rounding (~1e-6); `rows` comes from PackedRows.of(batch's mask)."""
        ids = batch["token_ids"]
        source, position = (rows.cells, rows.cell_rank) if rows.on_grid else (rows.flat, rows.rank)
        b, n, p = ids.shape
        tokens = ids.reshape(b * n, p).index_select(0, source)
        x = self.embed(tokens + self.slot_offset).sum(1)
        if "audio_embeds" in batch:
            audio = batch["audio_embeds"].to(x.dtype)
        else:
            audio = self.frame_proj(batch["audio_frames"].to(x.dtype))
        x = x.masked_scatter_((tokens[:, 0] == bt.AUDIO)[:, None], audio)  # audio rows in row-major order
        x += self.segment(batch["segment_ids"].reshape(-1).index_select(0, source))
        x += self._position_table(max(n, 1)).index_select(0, position).to(x.dtype)
        for block in self.blocks:
            x = block.infer_packed(x, rows)
        if rows.on_grid and rows.grid is not None:
            x = x.index_select(0, rows.grid)  # the tokens' rows of the grid, in packed order
        return self.pooler.packed(self.norm(x), rows.offsets_tensor).float()

    def _position_table(self, length: int) -> torch.Tensor:
        """float32 [>= length, D]: the sinusoid of positions 0, 1, ... as hidden() computes it per call
        (sin, cos of position x inv_freq), kept between calls and grown when a longer batch comes."""
        table = getattr(self, "_positions", None)
        if table is None or table.shape[0] < length:
            angle = torch.arange(max(length, self.config.max_len), dtype=torch.float32)[:, None] * self.inv_freq.float()
            table = self._positions = torch.cat([angle.sin(), angle.cos()], dim=-1)
        return table

    # --- disk -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The JSON written as sdscore_reward.json."""
        return {
            "format": "sdscore-reward",
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "config": asdict(self.config),
            "pooling": self.config.pooling,
            "sample_rate": self.config.sample_rate,
            "parameters": sum(p.numel() for p in self.parameters()),
            "card": self.card,
        }

    def save_pretrained(self, path: str | os.PathLike, card: dict[str, Any] | None = None) -> Path:
        """Write sdscore_reward.json + model.safetensors into `path` (each file atomically)."""
        from safetensors.torch import save_file

        if card:
            self.card.update(card)
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.state_dict().items()}
        with atomic_path(folder / WEIGHTS_FILE) as temp:
            save_file(state, str(temp), metadata={"format": "pt", "kind": self.kind})
        write_json(folder / CONFIG_FILE, self.describe())
        return folder

    @classmethod
    def claims(cls, path: str | os.PathLike) -> bool:
        """True if the directory has sdscore_reward.json of kind "compact" (or one too broken to tell)."""
        file = Path(path) / CONFIG_FILE
        if not file.is_file():
            return False
        try:
            return json.loads(file.read_text(encoding="utf-8")).get("kind") == cls.kind
        except (OSError, ValueError, AttributeError):
            return True  # from_dir then says what is wrong with it

    @classmethod
    def from_dir(cls, path: str | os.PathLike, **options: Any) -> CompactRewardModel:
        """Load sdscore_reward.json + model.safetensors; options: padding_side, device, dtype."""
        folder = Path(path)
        unknown = sorted(set(options) - set(LOAD_OPTIONS))
        if unknown:
            raise ModelError(f"{folder}: unknown options {unknown} for a compact model; expected {list(LOAD_OPTIONS)}")
        meta = _read_config(folder)
        try:
            values = dict(meta["config"])
            if options.get("padding_side") is not None:
                values["padding_side"] = options["padding_side"]
            config = CompactConfig.from_dict(values)
        except (KeyError, TypeError, ValueError) as error:
            raise ModelError(f"{folder / CONFIG_FILE}: bad config: {error}") from error
        card = meta.get("card") or {}
        if not isinstance(card, dict):
            raise ModelError(f"{folder / CONFIG_FILE}: 'card' must be an object, got {type(card).__name__}")
        _check_weight_files(folder, config)
        model = cls(config, card)
        model.load_state_dict(_read_weights(folder, model))
        model = model.eval()
        if options.get("device") is not None or options.get("dtype") is not None:
            device = resolve_device(options.get("device"))
            dtype = None if options.get("dtype") is None else resolve_dtype(options["dtype"], device)
            model = model.to(device=device, dtype=dtype)
        return model


@dataclass(frozen=True)
class PackedRows:
    """Where the tokens of a padded batch sit once packed: the mask's kept positions in row-major
    order (row b's tokens are packed[offsets[b]:offsets[b + 1]]), for masks whose every row is one
    run of positions (left or right padding, as collate lays them out); and the right-aligned grid
    [B, width] (width: the longest row) that attention runs over. The fused forward works on the
    tokens, or on the grid's cells (padding cells included) when the grid has little padding."""

    flat: torch.Tensor  # int64 [T]: row * L + position of each kept token, the packed order
    rank: torch.Tensor  # int64 [T]: each token's position within its row
    offsets: np.ndarray  # int64 [B + 1]
    lengths: np.ndarray  # int64 [B]
    #: int64 [T]: each token's place in the right-aligned grid [B, width] the attention call reads;
    #: None when the packed tokens already are that grid (every row as long as the longest)
    grid: torch.Tensor | None
    cells: torch.Tensor  # int64 [B * width]: each grid cell's position in the batch (a padding cell: one of its row's)
    cell_rank: torch.Tensor  # int64 [B * width]: each grid cell's position within its row

    @staticmethod
    def of(mask: torch.Tensor) -> PackedRows | None:
        """The layout of a CPU mask [B, L] (nonzero = kept), or None unless every row is one run of
        kept positions and some row has one (read with numpy, in place)."""
        keep = mask.numpy() != 0
        batch, length = keep.shape
        lengths = keep.sum(1, dtype=np.int64)
        starts = keep.argmax(1)
        at = np.arange(length)
        if not lengths.any() or not np.array_equal(keep, (at >= starts[:, None]) & (at < (starts + lengths)[:, None])):
            return None
        offsets = np.zeros(batch + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        rank = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        width = int(lengths.max())
        grid = None if offsets[-1] == batch * width else torch.from_numpy(np.repeat(np.arange(batch) * width, lengths) + rank)
        at = np.arange(width)
        # a row shorter than width has a padding position: 0 when left-padded, its length when right-padded
        padding = np.where(starts > 0, 0, np.minimum(lengths, length - 1))
        cells = np.where(at < lengths[:, None], starts[:, None] + at, padding[:, None]) + (np.arange(batch) * length)[:, None]
        return PackedRows(torch.from_numpy(np.flatnonzero(keep)), torch.from_numpy(rank), offsets, lengths, grid,
                          torch.from_numpy(cells.reshape(-1)), torch.from_numpy(np.tile(at, batch)))

    #: the fused forward works on the packed tokens when the rows fill the grid (no copies) or leave
    #: at least this share of it padding; below, on the grid's cells, padding included (the grid
    #: copies of each layer's attention cost more than the padding rows they save; interleaved on 16
    #: rows of 150-165 tokens, 5 % padding, tokens took 1.05x the padded time, at 35 % padding 0.80x)
    MIN_PADDING: ClassVar[float] = 0.15

    @property
    def on_grid(self) -> bool:
        """True when the forward works on the grid's B x width cells rather than the T tokens."""
        cells = len(self.lengths) * int(self.lengths.max())
        return self.grid is not None and self.offsets[-1] > (1 - self.MIN_PADDING) * cells

    @property
    def offsets_tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.offsets)

    def attention(self, qkv: torch.Tensor, heads: int) -> torch.Tensor:
        """Span attention within each row of qkv [T or B * width, 3D] (the forward's working rows)
        -> [same, D]: one call of the compiled core over the right-aligned grid [B, width] (tokens
        are copied into it and back only when the forward works on them and some row is shorter
        than the longest). Grid cells outside a row's span come out zero."""
        from sdscore._native import core

        batch, width, d = len(self.lengths), int(self.lengths.max()), qkv.shape[1] // 3
        copies = self.grid is not None and not self.on_grid
        grid = qkv.new_empty(batch * width, 3 * d).index_copy_(0, self.grid, qkv) if copies else qkv.contiguous()
        out = core.span_attention(grid.numpy().reshape(batch, width, 3, heads, d // heads), np.zeros(batch, np.int64),
                                  self.lengths, (d // heads) ** -0.5, torch.get_num_threads())
        out = torch.from_numpy(out).view(batch * width, d)
        return out.index_select(0, self.grid) if copies else out


def _embedding(rows: int, width: int, meta: bool) -> nn.Embedding:
    """nn.Embedding(rows, width); on the meta device without its normal_ initialisation."""
    if meta:
        return nn.Embedding(rows, width, _weight=torch.empty(rows, width))
    return nn.Embedding(rows, width)


def _spans(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(starts, lengths) [B] when each row of keep [B, L] is one run of True (left or right
    padding), else None."""
    lengths = keep.sum(1)
    starts = torch.where(lengths > 0, keep.to(torch.int8).argmax(1), torch.zeros_like(lengths))
    at = torch.arange(keep.shape[1], device=keep.device)
    runs = (at >= starts[:, None]) & (at < (starts + lengths)[:, None])
    return (starts, lengths) if torch.equal(runs, keep) else None


def _read_config(folder: Path) -> dict[str, Any]:
    """The parsed sdscore_reward.json; ModelError for a missing, unreadable or foreign file."""
    file = folder / CONFIG_FILE
    if not folder.is_dir():
        raise ModelError(f"{folder}: not a directory (a compact reward model is a folder with {CONFIG_FILE} and {WEIGHTS_FILE})")
    if not file.is_file():
        raise ModelError(f"{folder}: {CONFIG_FILE} is missing")
    meta = read_json(file)
    if not isinstance(meta, dict):
        raise ModelError(f"{file}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("kind") != CompactRewardModel.kind:
        kind = meta.get("kind") if isinstance(meta, dict) else None
        raise ModelError(f"{file}: kind is {kind!r}, expected 'compact'")
    version = meta.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelError(f"{file}: format version {version!r} is not supported (this sdscore reads <= {FORMAT_VERSION})")
    return meta


def _check_weight_files(folder: Path, config: CompactConfig) -> None:
    """Every tensor's name and shape in model.safetensors' header against the config's model (built
    on the meta device), before the model is allocated: a config claiming huge sizes is refused,
    not allocated; the message says which tensors do not fit and which config key disagrees."""
    file = folder / WEIGHTS_FILE
    if not file.is_file():
        raise missing_safetensors(file)
    header = safetensors_header(file)
    c = config
    try:
        check_sizes(folder / CONFIG_FILE, [
            SizeRule("d_model", c.d_model, r"norm\.weight", 0),
            SizeRule("ff_size", c.ff_size, r"blocks\.0\.ff1\.weight", 0),
            SizeRule("n_layers", c.n_layers, r"blocks\.(\d+)\..+", None),
            SizeRule("frames_per_token * n_mels", c.frame_size, r"frame_proj\.weight", 1),
            SizeRule(f"bytes_per_token * {bt.VOCAB_SIZE}", c.bytes_per_token * bt.VOCAB_SIZE, r"embed\.weight", 0),
        ], header)
        size_error = None
    except ModelError as error:
        size_error = error
    try:
        with torch.device("meta"):
            expected = CompactRewardModel(config).state_dict()
    except (RuntimeError, ValueError, OverflowError) as error:  # sizes past what torch can describe
        raise size_error or ModelError(f"{folder / CONFIG_FILE}: sizes too large ({error})") from None
    try:
        check_state_fits(header, expected, str(file), "the config")
    except ModelError as error:
        raise ModelError(f"{error}; {size_error}" if size_error else str(error)) from None
    if size_error is not None:
        raise size_error


def _read_weights(folder: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """model.safetensors checked against the model's state dict: names, shapes, float dtypes and
    finite values; ModelError naming what differs."""
    file = folder / WEIGHTS_FILE
    state = read_safetensors(file)
    check_state(state, model.state_dict(), file, "the config")
    return state
