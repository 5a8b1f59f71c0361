"""SDiaReward checkpoints: a Qwen2.5-Omni thinker, a pooler over its last layer and `score_head`.

Reproduces what the authors' evaluator (MYJOKERML/SDiaReward, eval_model.py) feeds their
`QwenOmniThinkerReward`: the chat template of the base Qwen2.5-Omni processor applied with
add_generation_prompt=False to the turns (text part, then audio part), their judge system prompt
put first when the episode has no system turn, each clip padded/truncated to the base feature
extractor's n_samples (300 s for Qwen2.5-Omni) and turned into Whisper log-mel features, one
<|AUDIO|> token per audio-encoder output frame, then pooling over every attended position of the
last layer (system prompt, text and audio tokens alike) and `score_head` (no bias).

On-disk layout (their `save_pretrained`): config.json (thinker config) + model.safetensors or
shards with the thinker weights and `score_head.weight` (+ `pooler.attn.*` when trained with
attention pooling). Config, tokenizer, feature extractor and chat template come from the base
Qwen2.5-Omni directory (`base=`), or from processor files saved in the checkpoint directory. The
system prompt comes from `system_prompt=PATH` or `<checkpoint>/system_prompt.txt`, read verbatim.

Differences from the evaluator, all without effect on scores: it runs batch 1, we batch with
left padding (positions count attended tokens, as `get_rope_index` does for text and audio, so padded rows see
the same positions as unpadded ones; their `rope_deltas - delta0` only feeds generation with a
cache); each clip's log-mel is computed over the clip plus a short zero tail instead of the full
300 s buffer (same valid frames, same normalising maximum; see `clip_features`); pooling and the
head accumulate in float32. The released code has one prompt for both criteria, so
`Episode.criterion` is not used.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sdscore.checkpoint_files import (
    LIBRARY_LOAD_ERRORS,
    SizeRule,
    TensorInfo,
    check_finite,
    check_float_weights,
    check_sizes,
    hf_text_rules,
    missing_safetensors,
    read_config_json,
    resolve_device,
    resolve_dtype,
    tensor_in,
    tensor_index,
    weight_files,
)
from sdscore.errors import MissingDependencyError, ModelError, SdscoreError
from sdscore.models.base import Prepared, RewardModel, left_padded_ids
from sdscore.models.chat_prompts import (
    SYSTEM_PROMPT_FILE,
    chat_template_in,
    episode_label,
    multimodal_messages,
    read_system_prompt,
    with_system_prompt,
)
from sdscore.models.episodes import Episode
from sdscore.models.fused_decoder import fuse_decoder
from sdscore.models.heads import Pooler, pooling_name
from sdscore.models.packed_attention import packed_inputs, packed_language_model, packed_pooled
from sdscore.models.prefix_continuation import collate_prefix_groups, grouped_states
from sdscore.models.qwen_audio_tower import AudioTowerPlan, chunk_features, run_audio_tower
from sdscore.models.whisper_log_mel import clip_features, clip_frames, whisper_log_mel

LOAD_OPTIONS = ("base", "system_prompt", "pooling", "device", "dtype", "audio_first", "attn_implementation")
THINKER_TYPES = ("qwen2_5_omni_thinker", "qwen2_5_omni")
AUTHORS_CLASS = "QwenOmniThinkerReward"
PROCESSOR_FILES = ("tokenizer_config.json", "preprocessor_config.json")


def _transformers():
    try:
        import transformers
    except ImportError as error:
        raise MissingDependencyError(
            "SDiaReward checkpoints need transformers: pip install 'sdscore[hf]'"
        ) from error
    return transformers


def audio_token_count(frames: int) -> int:
    """Audio-encoder output length for `frames` log-mel frames (two stride-2 stages, as Qwen2.5-Omni)."""
    after_conv = (frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


def token_positions(mask: torch.Tensor) -> torch.Tensor:
    """int64 [3, B, L] rope positions of a padded batch: each attended token's index among its row's
    attended tokens (padding gets 0), on all three mrope axes. For text and audio (no image or
    video) this is what Qwen2.5-Omni's get_rope_index computes (tested), without its per-row loop."""
    return (mask.long().cumsum(1) - 1).clamp(min=0).expand(3, -1, -1)


#: clips per batched log-mel call (sorted by length first, so a batch pads little)
FRONT_END_BATCH = 32


def _clip_key(clip: np.ndarray | torch.Tensor) -> tuple:
    """Identity of a clip's samples: views of one loaded array (or tensor) have the same buffer
    address, length and stride (the cache holds the clip, so the address cannot be reused meanwhile)."""
    if isinstance(clip, torch.Tensor):
        return str(clip.device), clip.data_ptr(), len(clip), clip.stride()
    return clip.__array_interface__["data"][0], len(clip), clip.strides


class SDiaRewardQwenOmni(RewardModel):
    """SDiaReward (Qwen2.5-Omni thinker) reward model; `from_dir` loads the authors' checkpoints.

    `pooler` is heads.Pooler over every attended position: "mean" (their default), "attn" or
    "last". Their LastTokenPooling takes index `mask.sum() - 1`, right only without padding (their
    evaluator runs batch 1); ours takes the last attended position, which equals theirs at batch 1
    and stays right under left padding.
    """

    kind = "sdiareward-qwen-omni"
    padding_side = "left"
    #: fast tokenizers mutate their state per call; one lock per class keeps the model deep-copyable
    _tokenizer_lock = threading.Lock()
    sample_rate = 16000
    #: in-memory clips stay torch tensors on the model's device: the log-mel runs there
    takes_device_waveforms = True

    def __init__(self, backbone: nn.Module, tokenizer: Any, feature_extractor: Any, chat_template: str,
                 system_prompt: str, pooling: str = "mean", audio_first: bool = False):
        """backbone: transformers' Qwen2_5OmniThinkerModel (audio tower + vision + language model)."""
        super().__init__()
        config = backbone.config
        hidden_size = int(config.text_config.hidden_size)
        self.backbone = backbone
        self.pooler = Pooler(pooling, hidden_size)
        self.score_head = nn.Linear(hidden_size, 1, bias=False)
        self.tokenizer = tokenizer
        self.feature_extractor = feature_extractor
        self.chat_template = chat_template
        self.system_prompt = system_prompt
        self.audio_first = bool(audio_first)
        self.audio_token_id = int(config.audio_token_id)
        self.max_length = int(getattr(config.text_config, "max_position_embeddings", 0) or 0) or None
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else getattr(config.text_config, "pad_token_id", None) or 0)
        self.sample_rate = int(feature_extractor.sampling_rate)
        fuse_decoder(backbone.language_model)  # one q/k/v and one gate/up GEMM, fused norm/rotary/SiLU (inference)

    @property
    def max_clip_seconds(self) -> float:
        """The feature extractor's window (300 s for Qwen2.5-Omni); longer clips are truncated by it."""
        return int(self.feature_extractor.n_samples) / float(self.feature_extractor.sampling_rate)

    # ---- prepare / collate / hidden ----------------------------------------------------------

    def render(self, episode: Episode, audio: Sequence[np.ndarray | None]) -> tuple[str, list[np.ndarray]]:
        """The chat-template text of an episode (one <|AUDIO|> per clip) and its clips in order."""
        messages, clips = multimodal_messages(episode, audio, self.audio_first)
        messages = with_system_prompt(messages, self.system_prompt, as_parts=True)
        text = self.tokenizer.apply_chat_template(
            messages, chat_template=self.chat_template, tokenize=False, add_generation_prompt=False
        )
        return text, clips

    def prepare(self, episode: Episode, audio: Sequence[np.ndarray | None],
                features_cache: dict[tuple, tuple[np.ndarray, torch.Tensor]] | None = None) -> Prepared:
        """input_ids int64 [L] with each <|AUDIO|> widened to its clip's token count, the clips'
        log-mel features (float32 [n_mels, F] each) and clip_spans int64 [n_clips, 2] (each clip's
        token range in input_ids); length L counts every backbone token. features_cache (a
        waveform's buffer → (waveform, features)): a clip passed to several episodes is featurised
        once and its features are one tensor, which shared_prefix recognises without comparing."""
        text, clips = self.render(episode, audio)
        features, counts = [], []
        for n, clip in enumerate(clips):
            tokens = audio_token_count(clip_frames(self.feature_extractor, len(clip)))
            if tokens < 1:
                raise ValueError(f"{episode_label(episode)}: audio clip {n} is too short ({len(clip)} samples)")
            cached = None if features_cache is None else features_cache.get(_clip_key(clip))
            if cached is not None:
                features.append(cached[1])
            else:
                host = clip.cpu().numpy() if isinstance(clip, torch.Tensor) else clip
                features.append(clip_features(self.feature_extractor, host))
                if features_cache is not None:
                    features_cache[_clip_key(clip)] = (clip, features[-1])
            counts.append(tokens)
        with self._tokenizer_lock:
            ids = np.asarray(self.tokenizer(text)["input_ids"], dtype=np.int64)
        slots = np.flatnonzero(ids == self.audio_token_id)
        if len(slots) != len(clips):
            raise ValueError(
                f"{episode_label(episode)}: {len(slots)} audio placeholders for {len(clips)} clips "
                "(does a turn's text contain the audio token?)"
            )
        repeats = np.ones(len(ids), dtype=np.int64)
        repeats[slots] = counts
        ids = np.repeat(ids, repeats)
        if self.max_length is not None and len(ids) > self.max_length:
            raise ValueError(
                f"{episode_label(episode)}: {len(ids)} tokens, more than the model's {self.max_length} positions"
            )
        starts = slots + np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64) - 1)[:-1]]).astype(np.int64)
        spans = np.stack([starts, starts + np.asarray(counts, dtype=np.int64)], 1) if clips else np.zeros((0, 2), np.int64)
        return Prepared(length=len(ids), inputs={"input_ids": torch.from_numpy(ids), "features": features,
                                                 "clip_spans": spans})

    def prepare_many(
        self, episodes: Sequence[Episode], audio: Sequence[Sequence[np.ndarray | None]], inference: bool = False,
    ) -> list[Prepared | Exception]:
        """prepare() per episode; the log-mel of every distinct clip (by buffer: the clips a pair's
        episodes share are one loaded array) is computed once, in batches of similar length
        (whisper_log_mel), on the model's device when inference=True."""
        distinct: dict[tuple, np.ndarray] = {}
        for waves in audio:
            for wave in waves:
                clip = None if wave is None else wave if isinstance(wave, torch.Tensor) else np.asarray(
                    wave, dtype=np.float32)  # as multimodal_messages
                if clip is not None and clip.ndim == 1 and len(clip):
                    distinct.setdefault(_clip_key(clip), clip)
        device = next(self.parameters()).device if inference else torch.device("cpu")
        keys = sorted(distinct, key=lambda k: len(distinct[k]))
        cache: dict[tuple, tuple[np.ndarray, torch.Tensor]] = {}
        for start in range(0, len(keys), FRONT_END_BATCH):
            chunk = keys[start:start + FRONT_END_BATCH]
            try:
                batch = whisper_log_mel([distinct[k] for k in chunk], self.feature_extractor, device)
            except (ValueError, RuntimeError):  # these clips go one by one in prepare(), failing only their episodes
                continue
            for key, features in zip(chunk, batch):
                cache[key] = (distinct[key], features)
        out: list[Prepared | Exception] = []
        for episode, waves in zip(episodes, audio):
            try:
                out.append(self.prepare(episode, waves, cache))
            except (SdscoreError, ValueError) as error:
                out.append(error)
        return out

    def collate(self, items: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """input_ids / attention_mask int64 [B, L], left padding; when any clip, the clips' log-mel
        (in batch then turn order, the order their placeholders take in the flattened batch) cut
        into the audio tower's chunks: audio_chunks float32 [C, n_mels, max_chunk] and audio_plan
        (qwen_audio_tower.AudioTowerPlan: the tower's index bookkeeping, computed here on the host)."""
        batch = left_padded_ids(items, self.pad_token_id)
        clips = [f for item in items for f in item.inputs["features"]]
        if clips:
            batch.update(self._audio_inputs(clips))
        return batch

    def _audio_inputs(self, clips: Sequence[torch.Tensor]) -> dict[str, Any]:
        """audio_chunks [C, n_mels, max_chunk] and audio_plan (AudioTowerPlan, built on the host) of
        clips' log-mel features, in placeholder order."""
        plan = AudioTowerPlan.build([f.shape[1] for f in clips], int(self.backbone.audio_tower.n_window))
        return {"audio_chunks": chunk_features(torch.cat(list(clips), dim=1), plan), "audio_plan": plan}

    def hidden(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Thinker's last layer [B, L, H] and attention_mask [B, L].

        As the thinker's forward: token embeddings, audio-tower outputs scattered over the
        <|AUDIO|> positions, language model; positions (token_positions: what get_rope_index gives
        for text and audio) passed explicitly so the thinker keeps no rope_deltas state.
        """
        ids, mask = batch["input_ids"], batch["attention_mask"]
        embeds = self.backbone.get_input_embeddings()(ids)
        audio = self._audio_states(batch)
        if audio is not None:
            slots = (ids == self.audio_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(slots, audio.to(embeds.dtype))
        out = self.backbone.language_model(
            inputs_embeds=embeds, attention_mask=mask, position_ids=token_positions(mask), use_cache=False
        )
        return out.last_hidden_state, mask

    packs_inference = True

    def collate_for_inference(self, items: Sequence[Prepared]) -> dict[str, Any]:
        """The items packed into one row without padding (packed_attention.packed_inputs: ids,
        per-episode positions, cu_seqlens, offsets) plus collate()'s audio inputs."""
        batch = packed_inputs([item.inputs["input_ids"] for item in items])
        clips = [f for item in items for f in item.inputs["features"]]
        if clips:
            batch.update(self._audio_inputs(clips))
        return batch

    def inference_pooled(self, batch: dict[str, Any]) -> torch.Tensor:
        """pooled(); a collate_groups batch runs each group's shared prefix once, a packed batch
        (collate_for_inference) runs attention within each episode only, with no padding."""
        if "group_index" in batch:
            return self.pooler.pool_prefixed(*self.hidden_grouped(batch)).float()
        if "cu_seqlens" in batch:
            ids = batch["input_ids"]
            embeds = self.backbone.get_input_embeddings()(ids)
            audio = self._audio_states(batch)
            if audio is not None:
                embeds = embeds.masked_scatter((ids == self.audio_token_id).unsqueeze(-1), audio.to(embeds.dtype))
            states = packed_language_model(self.backbone.language_model, embeds, batch["position_ids"],
                                           batch["cu_seqlens"], batch["max_seqlen"], batch["bounds"])
            return packed_pooled(self.pooler, states, batch["offsets"])
        return self.pooled(batch)

    # ---- pair-prefix sharing (runtime/reward/prefix_groups.py decides the groups) ------------

    supports_prefix_sharing = True

    def shared_prefix(self, a: Prepared, b: Prepared) -> int:
        """Tokens a and b may compute once: their common first tokens, cut before the first clip
        that differs (features compared, the same cached tensor at once) or that the common part
        ends inside, and at most min(length) − 1 so each keeps a continuation."""
        ids_a, ids_b = a.inputs["input_ids"].numpy(), b.inputs["input_ids"].numpy()
        n = min(len(ids_a), len(ids_b)) - 1
        if n <= 0:
            return 0
        differ = np.flatnonzero(ids_a[:n] != ids_b[:n])
        length = int(differ[0]) if len(differ) else n
        feats_a, feats_b = a.inputs["features"], b.inputs["features"]
        for k, (start, end) in enumerate(a.inputs["clip_spans"].tolist()):
            if start >= length:
                break
            same = k < len(feats_b) and (feats_a[k] is feats_b[k] or torch.equal(feats_a[k], feats_b[k]))
            if end > length or not same:
                return int(start)
        return length

    #: "varlen" (packed continuations over the cached prefixes) or "padded" (the earlier path, for comparison)
    continuation_layout = "varlen"

    def collate_groups(self, groups: Sequence[tuple[Sequence[Prepared], int]]) -> dict[str, Any]:
        """One batch of groups (members, shared prefix length): prefix_continuation.collate_prefix_groups'
        layout, plus, when any clip, audio_chunks / audio_plan as collate() makes them (the prefixes'
        clips first, then the continuations') and prefix_audio (how many audio tokens the prefixes hold)."""
        batch, prefix_clips, cont_clips = collate_prefix_groups(groups, self.pad_token_id)
        clips = prefix_clips + cont_clips
        if clips:
            batch.update(self._audio_inputs(clips))
            batch["prefix_audio"] = sum(batch["audio_plan"].token_counts[: len(prefix_clips)])
        return batch

    def hidden_grouped(self, batch: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        """(prefix states [G, P, H], prefix_mask, continuation states [N, C, H], cont_mask,
        group_index) of a collate_groups batch (prefix_continuation.grouped_states): the prefixes
        run once, packed, keeping their keys and values; the continuations run on them, packed
        (continuation_layout "varlen") or right-padded over a gathered cache ("padded")."""
        layout = self.continuation_layout
        prefix_ids = batch["prefix_input_ids"]
        cont_ids = batch["cont_packed_ids"] if layout == "varlen" else batch["cont_ids"]
        embed = self.backbone.get_input_embeddings()
        prefix_embeds, cont_embeds = embed(prefix_ids), embed(cont_ids)
        audio = self._audio_states(batch)
        if audio is not None:
            audio = audio.to(prefix_embeds.dtype)
            split = int(batch["prefix_audio"])
            prefix_embeds = prefix_embeds.masked_scatter((prefix_ids == self.audio_token_id).unsqueeze(-1), audio[:split])
            cont_embeds = cont_embeds.masked_scatter((cont_ids == self.audio_token_id).unsqueeze(-1), audio[split:])
        return grouped_states(self.backbone.language_model, batch, prefix_embeds, cont_embeds, layout)

    def _audio_states(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """Audio-tower outputs [sum tokens, H] of a batch's clips in placeholder order, or None.

        collate's audio_chunks + audio_plan run with one attention call per layer
        (qwen_audio_tower); a hand-made batch with transformers' input_features [n_mels, T] +
        feature_lengths [N] runs the tower's own forward."""
        if "audio_plan" in batch:
            return run_audio_tower(self.backbone.audio_tower, batch["audio_chunks"], batch["audio_plan"])
        lengths = batch.get("feature_lengths")
        if lengths is None or not lengths.numel():
            return None
        after_conv = (lengths - 1) // 2 + 1
        tower = self.backbone.audio_tower
        return tower(batch["input_features"], feature_lens=lengths, aftercnn_lens=after_conv).last_hidden_state

    # ---- loading -----------------------------------------------------------------------------

    @classmethod
    def claims(cls, path: str | os.PathLike) -> bool:
        """A config.json of a Qwen2.5-Omni thinker (or their reward class): from_dir then checks the head."""
        config = _read_json(Path(path) / "config.json")
        if config is None:
            return False
        return config.get("model_type") in THINKER_TYPES or AUTHORS_CLASS in (config.get("architectures") or [])

    @classmethod
    def from_dir(cls, path: str | os.PathLike, **options: Any) -> SDiaRewardQwenOmni:
        """Load an SDiaReward checkpoint directory (local files only).

        options: base (Qwen2.5-Omni directory: config, tokenizer, feature extractor, chat template),
        system_prompt (file path; default <path>/system_prompt.txt), pooling (mean | attn | last;
        default: config's pooling_type, else attn when pooler.attn weights exist, else mean),
        device, dtype (auto = bfloat16 on CUDA, float32 elsewhere), audio_first (audio part before
        the text part of a turn), attn_implementation (default sdpa).
        """
        folder = Path(path)
        unknown = sorted(set(options) - set(LOAD_OPTIONS))
        if unknown:
            raise ModelError(f"{folder}: unknown options {unknown} for {cls.kind}; expected {list(LOAD_OPTIONS)}")
        if not folder.is_dir():
            raise ModelError(f"{folder}: not a directory (an SDiaReward checkpoint is a save_pretrained folder)")
        if read_config_json(folder) is None:
            raise ModelError(f"{folder}: config.json is missing")
        files = weight_files(folder)
        if not files:
            raise missing_safetensors(folder / "model.safetensors")
        keys = tensor_index(files)
        check_float_weights(keys)
        if "score_head.weight" not in keys:
            raise ModelError(
                f"{folder}: no score_head.weight in {[f.name for f in files] or 'any *.safetensors file'} — an "
                f"SDiaReward checkpoint is the save_pretrained of their {AUTHORS_CLASS} (thinker weights + "
                "score_head); a plain Qwen2.5-Omni model has no reward head"
            )
        source = cls._processor_dir(folder, options.get("base"))
        prompt = read_system_prompt(folder, options.get("system_prompt"))
        if prompt is None:
            raise ModelError(
                f"{folder}: no system prompt — SDiaReward scores only reproduce with the authors' exact prompt "
                f"(SYSTEM_PROMPT in their model/processing_qwen_omni_thinker_reward.py); save it verbatim as "
                f"{folder / SYSTEM_PROMPT_FILE} or pass system_prompt=PATH"
            )
        transformers = _transformers()
        config_source = Path(options.get("base") or folder)
        config = cls._thinker_config(transformers, config_source)
        check_sizes(config_source / "config.json", size_rules(config), keys)
        pooling = cls._pooling(options.get("pooling"), config, keys)
        device = resolve_device(options.get("device"))
        dtype = resolve_dtype(options.get("dtype"), device)
        tokenizer, feature_extractor, template = cls._processor_parts(transformers, source)
        backbone = cls._backbone(transformers, folder, config, dtype, options.get("attn_implementation") or "sdpa")
        model = cls(backbone, tokenizer, feature_extractor, template, prompt, pooling, options.get("audio_first", False))
        head = read_tensors(keys, ["score_head.weight"] + [k for k in keys if k.startswith("pooler.attn.")])
        cls._load_head(model, folder, head)
        model = model.to(device=device, dtype=dtype).eval()
        check_finite(model.named_parameters(), tensor_in(keys, folder))
        return model

    @staticmethod
    def _processor_dir(folder: Path, base: str | os.PathLike | None) -> Path:
        if base is not None:
            base = Path(base)
            if not base.is_dir():
                raise ModelError(f"base={os.fspath(base)!r}: not a directory (give the base Qwen2.5-Omni model folder)")
            return base
        if all((folder / name).is_file() for name in PROCESSOR_FILES):
            return folder
        raise ModelError(
            f"{folder}: needs base=<Qwen2.5-Omni directory> — config, tokenizer, feature extractor and chat "
            f"template come from the base model, and the checkpoint has no {' / '.join(PROCESSOR_FILES)}"
        )

    @staticmethod
    def _thinker_config(transformers: Any, source: str | os.PathLike) -> Any:
        try:
            return transformers.Qwen2_5OmniThinkerConfig.from_pretrained(os.fspath(source), local_files_only=True)
        except LIBRARY_LOAD_ERRORS as error:
            raise ModelError(f"{source}: cannot read a Qwen2.5-Omni thinker config from config.json: {error}") from error

    @staticmethod
    def _pooling(option: str | None, config: Any, keys: dict[str, Any]) -> str:
        choice = option or getattr(config, "pooling_type", None)
        if choice is None:
            choice = "attn" if "pooler.attn.weight" in keys else "mean"
        try:
            choice = pooling_name(choice)
        except ValueError as error:
            raise ModelError(str(error)) from error
        if choice == "attn" and "pooler.attn.weight" not in keys:
            raise ModelError("pooling='attn' needs pooler.attn.weight in the checkpoint (it was trained without it)")
        return choice

    @staticmethod
    def _processor_parts(transformers: Any, source: Path) -> tuple[Any, Any, str]:
        if not any((source / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
            raise ModelError(f"{source}: no tokenizer files (tokenizer.json / tokenizer_config.json / vocab.json)")
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(os.fspath(source), local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ModelError(f"{source}: cannot load the tokenizer: {error}") from error
        if not (source / "preprocessor_config.json").is_file():
            raise ModelError(f"{source}: preprocessor_config.json (the Whisper feature extractor) is missing")
        try:
            feature_extractor = transformers.WhisperFeatureExtractor.from_pretrained(
                os.fspath(source), local_files_only=True
            )
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ModelError(f"{source}: cannot load the feature extractor: {error}") from error
        template = chat_template_in(source) or getattr(tokenizer, "chat_template", None)
        if not template:
            raise ModelError(f"{source}: no chat template (chat_template.jinja, chat_template.json or tokenizer_config)")
        if getattr(tokenizer, "audio_token", None) is None:
            raise ModelError(f"{source}: the tokenizer defines no audio_token (not a Qwen2.5-Omni tokenizer)")
        return tokenizer, feature_extractor, template

    @staticmethod
    def _backbone(transformers: Any, folder: Path, config: Any, dtype: torch.dtype, attn: str) -> nn.Module:
        """Qwen2_5OmniThinkerModel from the checkpoint (old `model.*` / `audio_tower.*` key layout or
        the new one; lm_head, score_head and pooler keys are not part of it)."""
        level = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # the load report lists score_head as unexpected
        try:
            backbone, info = transformers.Qwen2_5OmniThinkerModel.from_pretrained(
                os.fspath(folder), config=config, dtype=dtype, attn_implementation=attn,
                local_files_only=True, output_loading_info=True,
            )
        except LIBRARY_LOAD_ERRORS as error:
            raise ModelError(f"{folder}: cannot load the Qwen2.5-Omni thinker weights: {error}") from error
        finally:
            transformers.logging.set_verbosity(level)
        missing = sorted(info.get("missing_keys") or [])
        if missing or info.get("mismatched_keys"):
            raise ModelError(
                f"{folder}: thinker weights do not fit the base config: missing {missing[:5]}"
                f"{' ...' if len(missing) > 5 else ''}, mismatched {list(info.get('mismatched_keys') or [])[:5]}"
            )
        return backbone

    @staticmethod
    def _load_head(model: SDiaRewardQwenOmni, folder: Path, head: dict[str, torch.Tensor]) -> None:
        weight = head["score_head.weight"]
        if tuple(weight.shape) != (1, model.hidden_size):
            raise ModelError(
                f"{folder}: score_head.weight has shape {tuple(weight.shape)}, expected (1, {model.hidden_size}) "
                "(one scalar reward on the thinker's hidden size)"
            )
        state = {"score_head.weight": weight}
        if model.pooler.kind == "attn":
            state.update({k: v for k, v in head.items() if k.startswith("pooler.attn.")})
        model.load_head(state)


def _read_json(file: Path) -> dict | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def size_rules(config: Any) -> list[SizeRule]:
    """The thinker config's sizes as the checkpoint's tensors show them (either key layout: the
    4.x `model.* audio_tower.* visual.*` or the newer `model.language_model.* model.audio_tower.*`)."""
    text, audio, vision = (getattr(config, name).to_dict() for name in ("text_config", "audio_config", "vision_config"))
    lm = r"(?:model\.)?(?:language_model\.)?"
    tower, visual = r"(?:model\.)?audio_tower\.", r"(?:model\.)?visual\."
    return hf_text_rules(text, lm, "text_config.") + [
        SizeRule("text_config.hidden_size", text.get("hidden_size"), r"score_head\.weight", 1),
        SizeRule("audio_config.d_model", audio.get("d_model"), tower + r"conv1\.weight", 0),
        SizeRule("audio_config.num_mel_bins", audio.get("num_mel_bins"), tower + r"conv1\.weight", 1),
        SizeRule("audio_config.encoder_ffn_dim", audio.get("encoder_ffn_dim"), tower + r"layers\.0\.fc1\.weight", 0),
        SizeRule("audio_config.encoder_layers", audio.get("encoder_layers"), tower + r"layers\.(\d+)\..+", None),
        SizeRule("audio_config.output_dim", audio.get("output_dim"), tower + r"proj\.weight", 0),
        SizeRule("vision_config.hidden_size", vision.get("hidden_size"), visual + r"patch_embed\.proj\.weight", 0),
        SizeRule("vision_config.intermediate_size", vision.get("intermediate_size"),
                 visual + r"blocks\.0\.mlp\.(?:gate_proj|up_proj|fc1)\.weight", 0),
        SizeRule("vision_config.depth", vision.get("depth"), visual + r"blocks\.(\d+)\..+", None),
    ]


def read_tensors(names: dict[str, TensorInfo], wanted: Sequence[str]) -> dict[str, torch.Tensor]:
    """The `wanted` tensors (float32, CPU) from the files `names` maps them to."""
    from safetensors import safe_open

    out = {}
    for name in wanted:
        with safe_open(os.fspath(names[name].file), framework="pt") as handle:
            out[name] = handle.get_tensor(name).float()
    return out
