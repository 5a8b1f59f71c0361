"""Realistic shapes for bench/reward.py --realistic: Qwen2.5-Omni-3B- and 7B-shaped thinkers
(random weights, bf16, built on the device), 30-s clips and mixed lengths, a ~450-token system prompt.

- Models: OMNI_3B_SIZES (tests/tiny_reward_models.py) and OMNI_7B_SIZES below — the 7B numbers are
  Qwen2.5-Omni-7B's thinker, which are transformers' Qwen2.5-Omni config defaults: a Qwen2.5-7B
  language model (28 layers of 3584, GQA 28/4 heads of 128, MLP 18944, 152064-token vocabulary,
  MRoPE sections 16/24/24) and the Whisper-large-v3-sized audio tower projected to 3584.
- Tokens: a byte-level BPE (Qwen2's pre-tokenizer and byte alphabet, merges trained here on the
  system prompt and the bench's words) wrapped in Qwen2Tokenizer with Qwen2.5-Omni's special
  tokens, so English words cost about one token each as in Qwen's own vocabulary; the judge-style
  SYSTEM_PROMPT is ~450 such tokens (its count is printed). Audio tokens follow the model: one per
  40 ms of clip (a 30-s clip is 750).
- Clips: the bench's TTS clips (16 kHz) concatenated with 0.3-s pauses into longer speech:
  "30-s clips" (every turn 30 s) and "mixed 2-30 s" (each turn's length uniform in 2-30 s).

The rows are bench/reward.py's model_rows (ours with and without prefix sharing vs (a) the
authors' 300-s processor loop, (b) the one-by-one loop, (c) a plain HF batched forward, and MFU).
Without CUDA (`--quick`: the rehearsal) the same data and code run on the tiny thinker sizes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

#: Qwen2.5-Omni-7B's thinker (transformers' Qwen2_5OmniAudioEncoderConfig / Qwen2_5OmniTextConfig defaults)
OMNI_7B_SIZES = {
    "audio": {"num_mel_bins": 128, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
              "d_model": 1280, "output_dim": 3584, "max_source_positions": 1500, "n_window": 100},
    "vision": {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 3584,
               "fullatt_block_indexes": [0], "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    "text": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "mrope_section": [16, 24, 24], "vocab_size": 152064},
}

#: a judge-style system prompt of SDiaReward's kind (the authors' exact text is not public): ~450 BPE tokens
SYSTEM_PROMPT = """You are an expert judge of spoken dialogue. You will hear a conversation between a user and a \
voice assistant. Every turn comes with its audio recording and, where available, a transcript. Your task is to \
judge only the FINAL TURN of the assistant, given everything that was said before it.

Judge the final turn as speech, not as text. A reply that reads well on paper can still sound wrong when it is \
spoken. Listen to how the words are delivered as well as to what is said.

Consider the following aspects, in this order of importance:

1. Relevance and helpfulness. Does the reply answer what the user actually asked in the previous turn? Does it \
keep the facts and the intent of the earlier turns? A reply that ignores the question, repeats itself, or \
contradicts something the user said should be judged poorly, however well it sounds.

2. Spoken naturalness. Does the reply sound like something a person would say aloud in this situation? Natural \
spoken replies are usually short, use everyday words, and avoid lists, headings, long numbers, symbols and \
other written forms that do not work in speech. Filler words, small hesitations and informal phrasing are \
acceptable when they fit the conversation.

3. Paralinguistic fit. Do the tone, the speaking rate, the pauses and the emotion of the voice fit the content \
and the mood of the conversation? A cheerful voice for sad news, a flat voice for an excited question, or a \
rushed delivery of careful instructions should be judged poorly.

4. Audio quality. Is the speech clear and easy to understand? Noise, clipping, cut words, long silences or a \
robotic voice make a reply harder to follow and should lower your judgment.

5. Consistency of the speaker. The assistant should keep the same voice, the same persona and the same level \
of formality across the conversation, unless the user asked for a change.

Do not reward a reply for being long. Do not reward a reply for repeating the question. Do not judge the \
user's turns; they are context only. Do not let the transcript override what you hear: when the audio and the \
transcript disagree, trust the audio.

Think about how a careful human listener would feel about the final turn, then give a single overall judgment \
of its quality as a spoken reply in this conversation. Higher is better."""

CLIP_GAP_SECONDS = 0.3
RATE = 16000


def bpe_tokenizer(corpus: list[str]):
    """A Qwen2Tokenizer whose byte-level BPE merges are trained on `corpus` (Qwen2's pre-tokenizer
    regex and byte alphabet), plus Qwen2.5-Omni's special tokens."""
    from tiny_reward_models import OMNI_NAMED_TOKENS, OMNI_SPECIAL_TOKENS
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    probe = Qwen2Tokenizer(vocab={"a": 0}, merges=[])  # its backend carries Qwen2's pre-tokenizer
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = probe.backend_tokenizer.pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=4000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(corpus, trainer)
    model = bpe.to_str()
    import json

    spec = json.loads(model)["model"]
    vocab = dict(spec["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    for token in OMNI_SPECIAL_TOKENS:
        vocab.setdefault(token, len(vocab))
    return Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                          pad_token="<|endoftext|>",
                          additional_special_tokens=[t for t in OMNI_SPECIAL_TOKENS if t not in ("<|im_end|>", "<|endoftext|>")],
                          extra_special_tokens=dict(OMNI_NAMED_TOKENS))


def long_clips(paths: list[str], folder: Path, seconds: list[float], prefix: str) -> list[str]:
    """Clips of the given lengths (16 kHz float WAV in folder), each the TTS clips concatenated in
    turn (0.3-s pauses between them) and cut to length; consecutive clips start at different ones."""
    import soundfile as sf

    from sdscore.audio import load

    speech = [load(p, RATE) for p in paths]
    gap = np.zeros(int(CLIP_GAP_SECONDS * RATE), np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    out, k = [], 0
    for i, s in enumerate(seconds):
        parts, n = [], 0
        while n < s * RATE:
            parts += [speech[k % len(speech)], gap]
            n += len(speech[k % len(speech)]) + len(gap)
            k += 1
        target = folder / f"{prefix}{i:03d}.wav"
        sf.write(target, np.concatenate(parts)[: int(s * RATE)], RATE, subtype="FLOAT")
        out.append(str(target))
    return out


def pair_sets(paths: list[str], folder: Path, n_pairs: int) -> dict[str, list]:
    """{"30-s clips": pairs, "mixed 2-30 s": pairs}: reward.make_pairs' SDiaReward-shaped pairs
    (context of 1 or 3 turns, different final assistant turns) over long clips."""
    from reward import CLIPS_PER_PAIR, make_pairs

    rng = np.random.default_rng(1)
    n = CLIPS_PER_PAIR * n_pairs
    return {
        "30-s clips": make_pairs(long_clips(paths, folder / "clips-30s", [30.0] * n, "l"), n_pairs),
        "mixed 2-30 s": make_pairs(long_clips(paths, folder / "clips-mixed", rng.uniform(2, 30, n).round(2).tolist(),
                                              "m"), n_pairs, seed=1),
    }


def omni_model(sizes: dict, tokenizer, template_from, device: str, dtype: torch.dtype):
    """The SDiaReward adapter over a random thinker of `sizes` in `dtype`, built directly on
    `device`, with `tokenizer` and SYSTEM_PROMPT; the feature extractor and chat template come
    from the reward model `template_from` (the tiny checkpoint's: Qwen2.5-Omni's own)."""
    from tiny_reward_models import tiny_thinker_config
    from transformers import Qwen2_5OmniThinkerModel

    from sdscore.models.sdiareward_qwen import SDiaRewardQwenOmni

    config = tiny_thinker_config(tokenizer, sizes)
    torch.manual_seed(0)
    with torch.device(device):
        backbone = Qwen2_5OmniThinkerModel._from_config(config, dtype=dtype, attn_implementation="sdpa")
    model = SDiaRewardQwenOmni(backbone, tokenizer, template_from.feature_extractor, template_from.chat_template,
                               SYSTEM_PROMPT)
    return model.to(device=device, dtype=dtype).eval()


def realistic_rows(paths: list[str], folder: Path, device: str, rounds: int, quick: bool) -> list:
    """bench/reward.py's model_rows for each (model, pair set): on CUDA the 3B- and 7B-shaped bf16
    models (8 pairs per set, the authors' loop on 1 pair); without CUDA the tiny sizes (1 pair)."""
    from reward import WORDS, model_rows, prepared_items, tiny_qwen_checkpoint
    from tiny_reward_models import OMNI_3B_SIZES, TINY_SIZES

    from sdscore.models.loading import load_reward_model

    tokenizer = bpe_tokenizer([SYSTEM_PROMPT, " ".join(WORDS)] * 4)
    prompt_tokens = len(tokenizer(SYSTEM_PROMPT)["input_ids"])
    checkpoint = tiny_qwen_checkpoint(folder)
    template_from = load_reward_model(checkpoint[0], base=checkpoint[1])
    n_pairs = 1 if quick and device != "cuda" else (4 if quick else 8)
    sets = pair_sets(paths, folder, n_pairs)
    if device == "cuda":
        models = {"Qwen2.5-Omni-3B-shaped": (OMNI_3B_SIZES, torch.bfloat16),
                  "Qwen2.5-Omni-7B-shaped": (OMNI_7B_SIZES, torch.bfloat16)}
    else:
        models = {"tiny thinker (CPU rehearsal)": (TINY_SIZES, torch.float32)}
    rows = []
    for label, (sizes, dtype) in models.items():
        model = omni_model(sizes, tokenizer, template_from, device, dtype)
        params = sum(p.numel() for p in model.parameters()) / 1e9
        for set_name, pairs in sets.items():
            lengths = [item.length for item in prepared_items(model, pairs)]
            print(f"{label}, {set_name}: {params:.2f} B parameters, {str(dtype)[6:]}; system prompt {prompt_tokens} "
                  f"tokens; episode lengths {min(lengths)}-{max(lengths)} tokens (mean {np.mean(lengths):.0f})")
            name = f"{label} ({str(dtype)[6:]}), {set_name}, {prompt_tokens}-token prompt"
            rows += model_rows(name, model, pairs, rounds, 8, device, 1)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows
