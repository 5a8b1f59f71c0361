"""Tiny random-weight reward checkpoints, written offline in the on-disk layouts of the real ones.

- `build_tiny_sdiareward`: a base Qwen2.5-Omni directory (config.json with thinker_config,
  tokenizer, preprocessor_config.json with the Whisper front-end at 300 s, chat_template.json)
  and an SDiaReward checkpoint (their `QwenOmniThinkerReward.save_pretrained`: thinker config +
  model.safetensors in the transformers-4.x key layout `audio_tower.* visual.* model.* lm_head.*`
  plus `score_head.weight`, and `pooler.attn.*` for attention pooling).
- `build_tiny_trl`: a TRL `AutoModelForSequenceClassification(num_labels=1)` checkpoint (Qwen2)
  with its tokenizer and chat template.

Tokenizers are byte-level BPE vocabularies (256 byte symbols, no merges) plus the special tokens
the real ones define, wrapped in transformers' Qwen2Tokenizer. Used by tests and by bench/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

OMNI_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", "<|vision_bos|>", "<|vision_eos|>", "<|vision_pad|>", "<|IMAGE|>", "<|VIDEO|>",
)
OMNI_NAMED_TOKENS = {
    "image_token": "<|IMAGE|>", "audio_token": "<|AUDIO|>", "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>",
}

#: Qwen2.5-Omni's chat template (chat_template.json of the released processor)
OMNI_CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}{% if add_audio_id %}Audio {{ audio_count.value }}: "
    "{% endif %}<|audio_bos|><|AUDIO|><|audio_eos|>{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: "
    "{% endif %}<|vision_bos|><|VIDEO|><|vision_eos|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: a ChatML text template in the style of Qwen2.5-Instruct (default system turn when none is given)
CHATML_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: stands in for the authors' judge prompt; leading/trailing newlines check it is read verbatim
TINY_SYSTEM_PROMPT = "\nYou judge the FINAL TURN of a spoken dialogue.\n\n"

#: Qwen2.5-Omni's Whisper front-end: 128 mel bins, clips padded/truncated to 300 s
OMNI_PREPROCESSOR = {
    "chunk_length": 300, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
    "hop_length": 160, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "Qwen2VLImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711],
    "max_pixels": 12845056, "merge_size": 2, "min_pixels": 3136, "n_fft": 400, "n_samples": 4800000,
    "nb_max_frames": 30000, "padding_side": "right", "padding_value": 0.0, "patch_size": 14,
    "processor_class": "Qwen2_5OmniProcessor", "return_attention_mask": True, "sampling_rate": 16000,
    "temporal_patch_size": 2,
}


def byte_level_tokenizer(special_tokens, named_tokens=None, eos="<|im_end|>", pad="<|endoftext|>", chat_template=None):
    """A Qwen2Tokenizer over the 256 byte-level symbols (no merges) plus `special_tokens`."""
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {symbol: i for i, symbol in enumerate(bytes_to_unicode().values())}
    for token in special_tokens:
        vocab[token] = len(vocab)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=[], unk_token=None, bos_token=None, eos_token=eos, pad_token=pad,
        additional_special_tokens=[t for t in special_tokens if t not in (eos, pad)],
        extra_special_tokens=dict(named_tokens or {}),
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


TINY_SIZES = {
    "audio": {"num_mel_bins": 128, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 32,
              "d_model": 16, "output_dim": 32, "max_source_positions": 1500, "n_window": 100},
    "vision": {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32,
               "fullatt_block_indexes": [0], "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    "text": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "mrope_section": [2, 1, 1]},
}

#: Qwen2.5-Omni-3B's thinker: its language model (Qwen2.5-3B: 36 layers of 2048, GQA 16/2 heads of
#: 128, MLP 11008, 151936-token vocabulary) and its Whisper-large-v3-sized audio tower (32 layers of
#: 1280, 20 heads, FFN 5120, projected to 2048). The vision tower stays at one tiny block: audio
#: episodes never run it.
OMNI_3B_SIZES = {
    "audio": {"num_mel_bins": 128, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
              "d_model": 1280, "output_dim": 2048, "max_source_positions": 1500, "n_window": 100},
    "vision": {**TINY_SIZES["vision"], "out_hidden_size": 2048},
    "text": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
             "num_key_value_heads": 2, "mrope_section": [16, 24, 24], "vocab_size": 151936},
}


def tiny_thinker_config(tokenizer, sizes=None):
    """A Qwen2.5-Omni thinker config wired to `tokenizer`'s special tokens; sizes: TINY_SIZES (a
    1-layer audio tower, a 1-block ViT and a 2-layer LM with H=32, the default) or OMNI_3B_SIZES."""
    from transformers import Qwen2_5OmniThinkerConfig

    sizes = sizes or TINY_SIZES
    text = dict(sizes["text"])
    mrope = text.pop("mrope_section")
    ids = tokenizer.convert_tokens_to_ids
    return Qwen2_5OmniThinkerConfig(
        audio_config=dict(sizes["audio"]),
        vision_config=dict(sizes["vision"]),
        text_config={
            "vocab_size": len(tokenizer), "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": mrope},
            "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
            "tie_word_embeddings": False, **text,
        },
        audio_token_index=ids("<|AUDIO|>"), image_token_index=ids("<|IMAGE|>"), video_token_index=ids("<|VIDEO|>"),
        audio_start_token_id=ids("<|audio_bos|>"), audio_end_token_id=ids("<|audio_eos|>"),
        vision_start_token_id=ids("<|vision_bos|>"), vision_end_token_id=ids("<|vision_eos|>"),
        vision_token_id=ids("<|vision_pad|>"), user_token_id=ids("u"),
        bos_token_id=ids("<|im_start|>"), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def _legacy_name(name: str) -> str:
    """transformers-5 thinker parameter name -> the 4.x name their checkpoints carry."""
    for new, old in (("model.audio_tower.", "audio_tower."), ("model.visual.", "visual."),
                     ("model.language_model.", "model.")):
        if name.startswith(new):
            return old + name[len(new):]
    return name


def build_tiny_sdiareward(ckpt_dir, base_dir, pooling="mean", seed=0, system_prompt=TINY_SYSTEM_PROMPT,
                          with_processor=False, score_head=True):
    """Write a tiny base Qwen2.5-Omni directory and an SDiaReward checkpoint; returns (ckpt, base).

    system_prompt: text saved verbatim as <ckpt>/system_prompt.txt (None: no file);
    with_processor: also save tokenizer / preprocessor / chat template in the checkpoint (their
    trainer's save_model does); score_head=False leaves the head out (a plain thinker).
    """
    from safetensors.torch import save_file
    from transformers import (
        GenerationConfig,
        Qwen2_5OmniConfig,
        Qwen2_5OmniThinkerForConditionalGeneration,
    )
    from transformers.utils import logging

    ckpt, base = Path(ckpt_dir), Path(base_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    base.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(OMNI_SPECIAL_TOKENS, OMNI_NAMED_TOKENS)
    config = tiny_thinker_config(tokenizer)
    level = logging.get_verbosity()
    logging.set_verbosity_error()  # the default talker config's token ids lie outside its vocabulary
    try:
        Qwen2_5OmniConfig(thinker_config=config.to_dict(), enable_audio_output=False).save_pretrained(base)
    finally:
        logging.set_verbosity(level)
    processor_dirs = [base, ckpt] if with_processor else [base]
    for folder in processor_dirs:
        tokenizer.save_pretrained(folder)
        (folder / "preprocessor_config.json").write_text(json.dumps(OMNI_PREPROCESSOR, indent=2), encoding="utf-8")
        (folder / "chat_template.json").write_text(json.dumps({"chat_template": OMNI_CHAT_TEMPLATE}), encoding="utf-8")

    torch.manual_seed(seed)
    thinker = Qwen2_5OmniThinkerForConditionalGeneration(config).eval()
    state = {_legacy_name(k): v.detach().clone().contiguous() for k, v in thinker.state_dict().items()}
    width = config.text_config.hidden_size
    generator = torch.Generator().manual_seed(seed + 1)
    if score_head:
        state["score_head.weight"] = torch.randn(1, width, generator=generator)
    if pooling in ("attn", "attention"):
        state["pooler.attn.weight"] = torch.randn(1, width, generator=generator) * 0.5
        state["pooler.attn.bias"] = torch.randn(1, generator=generator)
    save_file(state, os.fspath(ckpt / "model.safetensors"), metadata={"format": "pt"})
    config.architectures = ["QwenOmniThinkerReward"]
    config.save_pretrained(ckpt)
    GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(ckpt)
    if system_prompt is not None:
        (ckpt / "system_prompt.txt").write_bytes(system_prompt.encode("utf-8"))
    return ckpt, base


def build_tiny_trl(dir, seed=0, chat_template=True):
    """Write a tiny TRL reward checkpoint (Qwen2ForSequenceClassification, num_labels=1) + tokenizer.

    chat_template=False saves the tokenizer without a template (the adapter then joins the texts).
    """
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    folder = Path(dir)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), chat_template=CHATML_TEMPLATE if chat_template else None
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, num_labels=1, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification(config).eval()
    with torch.no_grad():
        model.score.weight.copy_(torch.randn(model.score.weight.shape, generator=torch.Generator().manual_seed(seed + 1)))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
