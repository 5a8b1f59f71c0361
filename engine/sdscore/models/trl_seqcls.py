"""TRL reward checkpoints: `AutoModelForSequenceClassification(num_labels=1)` over the turns' text.

What TRL's RewardTrainer trains and saves: a causal LM body (`model.<base_model_prefix>`), a
`score` Linear(H, 1) read at the last token, and the tokenizer in the same directory. The model
reads text only: each turn's text (its transcript) becomes a chat message, the tokenizer's chat
template renders them (as TRL tokenizes conversational data: template, no extra special tokens),
and a tokenizer without a template gets the texts joined by newlines plus EOS (as TRL treats
plain-text data). The reward is read where transformers reads it: the last token that is not the
pad token. Batches are left-padded with positions counted over attended tokens, so a batched
score equals the model's own score of the episode alone.
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
    check_finite,
    check_float_weights,
    check_sizes,
    hf_text_rules,
    read_config_json,
    refusing_unsafe_pickles,
    resolve_device,
    resolve_dtype,
    tensor_in,
    tensor_index,
    weight_files,
)
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.models.base import Prepared, RewardModel, left_padded_ids
from sdscore.models.chat_prompts import (
    episode_label,
    read_system_prompt,
    text_messages,
    with_system_prompt,
)
from sdscore.models.episodes import Episode
from sdscore.models.heads import Pooler

LOAD_OPTIONS = ("system_prompt", "device", "dtype", "attn_implementation")
SUFFIX = "ForSequenceClassification"
#: one of these must sit beside the weights (AutoTokenizer would otherwise fall back to an empty vocabulary)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _transformers():
    try:
        import transformers
    except ImportError as error:
        raise MissingDependencyError("TRL reward checkpoints need transformers: pip install 'sdscore[hf]'") from error
    return transformers


def _config(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _check_weights(folder: Path, config: dict[str, Any]) -> dict:
    """The safetensors headers (empty for a pytorch_model.bin checkpoint), checked before anything is
    allocated: float dtypes for weights, and the config's sizes against the tensors' shapes."""
    index = tensor_index(weight_files(folder))
    check_float_weights(index)
    text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    label = "text_config." if text is not config else ""
    rules = hf_text_rules(text, label=label) + [SizeRule(label + "hidden_size", text.get("hidden_size"), r"score\.weight", 1)]
    check_sizes(folder / "config.json", rules, index)
    return index


class TrlSequenceClassifier(RewardModel):
    """A sequence-classification reward model: body → last non-pad token → `score` (its `score_head`)."""

    kind = "trl-seqcls"
    padding_side = "left"
    needs_audio = False  # transcripts only: the scorer skips loading audio
    #: fast tokenizers mutate their state per call; one lock per class keeps the model deep-copyable
    _tokenizer_lock = threading.Lock()

    def __init__(self, classifier: nn.Module, tokenizer: Any, system_prompt: str | None = None):
        """classifier: a transformers *ForSequenceClassification with num_labels=1 and a `score` Linear."""
        super().__init__()
        config = classifier.config.get_text_config()
        self.backbone = getattr(classifier, classifier.base_model_prefix)
        self.score_head = classifier.score  # HF's name; aliased so head_state()/load_head() work
        self.pooler = Pooler("last", int(self.score_head.in_features))
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.reward_pad_id = config.pad_token_id  # transformers reads the reward at the last token != this id
        pad = config.pad_token_id if config.pad_token_id is not None else tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else tokenizer.eos_token_id or 0)
        self.max_length = getattr(config, "max_position_embeddings", None)
        self.template = getattr(tokenizer, "chat_template", None)

    def token_ids(self, episode: Episode) -> list[int]:
        """The episode's token ids as TRL builds them (chat template, else newline-joined text + EOS)."""
        messages = with_system_prompt(text_messages(episode), self.system_prompt, as_parts=False)
        with self._tokenizer_lock:
            if self.template:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
                return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            ids = list(self.tokenizer("\n".join(m["content"] for m in messages))["input_ids"])
        eos = self.tokenizer.eos_token_id
        return ids + [eos] if eos is not None and (not ids or ids[-1] != eos) else ids

    def prepare(self, episode: Episode, audio: Sequence[np.ndarray | None]) -> Prepared:
        """input_ids int64 [L]; audio is not read (ValueError for a turn without text)."""
        ids = self.token_ids(episode)
        if not ids:
            raise ValueError(f"{episode_label(episode)}: no tokens")
        if self.max_length and len(ids) > self.max_length:
            raise ValueError(f"{episode_label(episode)}: {len(ids)} tokens, more than the model's {self.max_length}")
        return Prepared(length=len(ids), inputs={"input_ids": torch.tensor(ids, dtype=torch.long)})

    def collate(self, items: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """input_ids / attention_mask int64 [B, L], left padding."""
        return left_padded_ids(items, self.pad_token_id)

    def hidden(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Body's last layer [B, L, H] and the reward mask [B, L]: attended tokens that are not
        the pad token, so "last" pooling lands where transformers' classifier reads its logit."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        out = self.backbone(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        keep = mask if self.reward_pad_id is None else mask * (ids != self.reward_pad_id)
        return out.last_hidden_state, keep

    @classmethod
    def claims(cls, path: str | os.PathLike) -> bool:
        """config.json whose architectures name a *ForSequenceClassification class."""
        config = _config(Path(path))
        return config is not None and any(str(a).endswith(SUFFIX) for a in config.get("architectures") or [])

    @classmethod
    def from_dir(cls, path: str | os.PathLike, **options: Any) -> TrlSequenceClassifier:
        """Load a TRL reward directory; options: system_prompt (file; default <path>/system_prompt.txt
        when present, else the template's own default), device, dtype (auto = bfloat16 on CUDA,
        float32 elsewhere), attn_implementation (default sdpa)."""
        folder = Path(path)
        unknown = sorted(set(options) - set(LOAD_OPTIONS))
        if unknown:
            raise ModelError(f"{folder}: unknown options {unknown} for {cls.kind}; expected {list(LOAD_OPTIONS)}")
        config = read_config_json(folder)
        if config is None:
            raise ModelError(f"{folder}: config.json is missing")
        if not any(str(a).endswith(SUFFIX) for a in config.get("architectures") or []):
            raise ModelError(f"{folder / 'config.json'}: architectures {config.get('architectures')} name no *{SUFFIX}")
        labels = config.get("num_labels", len(config.get("id2label") or {}) or 2)
        if labels != 1:
            raise ModelError(f"{folder / 'config.json'}: num_labels is {labels}; a reward model has num_labels=1")
        index = _check_weights(folder, config)
        prompt = read_system_prompt(folder, options.get("system_prompt"))
        transformers = _transformers()
        device = resolve_device(options.get("device"))
        dtype = resolve_dtype(options.get("dtype"), device)
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise ModelError(f"{folder}: cannot load the tokenizer saved with the model: none of {list(TOKENIZER_FILES)}")
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(os.fspath(folder), local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ModelError(f"{folder}: cannot load the tokenizer saved with the model: {error}") from error
        try:
            with refusing_unsafe_pickles(folder):
                classifier = transformers.AutoModelForSequenceClassification.from_pretrained(
                    os.fspath(folder), dtype=dtype, attn_implementation=options.get("attn_implementation") or "sdpa",
                    local_files_only=True,
                )
        except LIBRARY_LOAD_ERRORS as error:
            raise ModelError(f"{folder}: cannot load the sequence-classification weights: {error}") from error
        score = getattr(classifier, "score", None)
        if not isinstance(score, nn.Linear) or score.out_features != 1:
            raise ModelError(f"{folder}: {type(classifier).__name__} has no `score` Linear(H, 1) reward head")
        model = cls(classifier, tokenizer, prompt).to(device=device, dtype=dtype).eval()
        check_finite(classifier.named_parameters(), tensor_in(index, folder))
        return model
