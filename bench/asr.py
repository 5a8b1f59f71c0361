"""Whisper ASR throughput: batched WhisperAsr vs model.generate per file (large-v3 shapes on CUDA, base on CPU).

The model is a random-weight Whisper in the Hugging Face layout with Whisper-large-v3's shapes
(32 + 32 layers of 1280, 20 heads, FFN 5120, 128 mel bins, 51866-token vocabulary: 1.55 B
parameters), fp16 on CUDA, written to a temp folder (config, safetensors, generation config,
tokenizer, feature extractor) and loaded from there the way `make_extractor("asr",
backend="whisper", model_dir=...)` loads a real checkpoint. The tokenizer is a byte-level one
padded with filler word tokens to the 51866 ids (each filler decodes to a word), so whatever a
random model emits decodes to words.

Random weights emit garbage and would stop at arbitrary lengths, so both sides are held to the
same decode length: the generation config suppresses every special token and sets
min_new_tokens = max_new_tokens (--tokens, 24 by default; --quick 4), so every clip decodes
exactly that many text tokens on both sides. The encoder always sees 30 s (Whisper pads every
clip to 30 s), so the work per file is the same whatever the clip.

ours: `sdscore.audio.load_many` + `WhisperAsr.run` (the extractor `score naturalness --whisper-dir`
and the judge's blueprint use), batches of 8 (its default) and of 32, word timings on.
peer: what a user writes per file — librosa.load, the checkpoint's WhisperFeatureExtractor, one
`model.generate(..., return_token_timestamps=True)` per file (batch 1), the tokenizer's decode.
Same model object size and dtype on both sides (each loads the folder once). Interleaved rounds
(bench/common.py), the ratio the median of the per-round ratios; the share of files whose
transcript is the same on both sides is printed (fp16 batched vs batch-1 kernels may flip an
argmax of a random model; on the CPU in fp32 they agree).

Clips: the seeded TTS clips bench/serve.py renders (.whl/tts on the GPU machine), rewritten at
16 kHz first so no side resamples, cycled to --files files (32 by default; --quick 4).
Without CUDA the model has Whisper-base's shapes (74 M parameters, fp32, 8 files; large-v3 in fp32 would need
~25 GiB and ~20 s of 2-core CPU per file's encoder: asked for with --shape large-v3, it is refused up front where
the memory is not there), and --quick runs a tiny shape (the script's rehearsal).
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_rounds, parser, rate_row, render_tts, report  # noqa: E402

#: Whisper-large-v3 (openai/whisper-large-v3 config.json)
LARGE_V3 = {"d_model": 1280, "encoder_layers": 32, "decoder_layers": 32, "encoder_attention_heads": 20,
            "decoder_attention_heads": 20, "encoder_ffn_dim": 5120, "decoder_ffn_dim": 5120, "num_mel_bins": 128,
            "vocab_size": 51866, "max_source_positions": 1500, "max_target_positions": 448}
#: Whisper-base (openai/whisper-base config.json): 74 M parameters, the shape a CPU run measures
#: (large-v3 in fp32 needs two 6.2 GB copies and ~20 s of 2-core CPU per file's encoder)
BASE = {**LARGE_V3, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
        "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048, "num_mel_bins": 80,
        "vocab_size": 51865}
#: a tiny Whisper for the CPU rehearsal (--quick without CUDA)
TINY = {**LARGE_V3, "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
#: large-v3's alignment heads (generation_config.json): word timings come from these
ALIGNMENT_HEADS = [[7, 0], [10, 17], [12, 18], [13, 12], [16, 1], [17, 14], [19, 11], [21, 4], [24, 1], [25, 6]]
#: whisper-base's (generation_config.json)
BASE_ALIGNMENT_HEADS = [[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4], [5, 6]]
#: --shape NAME -> (shape, label, alignment heads)
SHAPES = {"large-v3": (LARGE_V3, "Whisper-large-v3-shaped", ALIGNMENT_HEADS),
          "base": (BASE, "Whisper-base-shaped", BASE_ALIGNMENT_HEADS),
          "tiny": (TINY, "tiny Whisper (CPU rehearsal)", ALIGNMENT_HEADS)}
RATE = 16000


def whisper_tokenizer(vocab_size: int):
    """A WhisperTokenizer: the 256 byte-level symbols, filler words 'Ġw<i>' and Whisper's special
    tokens (end of text, start of transcript, en, tasks, no-timestamps, 1501 timestamps), vocab_size ids in all."""
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import WhisperTokenizer

    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
                "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
    specials += [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    vocab = {c: i for i, c in enumerate(ByteLevel.alphabet())}
    fillers = vocab_size - len(specials) - len(vocab)
    if fillers < 0:
        raise ValueError(f"vocab_size {vocab_size} is below the {len(specials) + len(vocab)} byte and special tokens")
    for i in range(fillers):
        vocab[f"Ġw{i}"] = len(vocab)
    for s in specials:
        vocab[s] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=vocab, merges=[])
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer, {s: tokenizer.convert_tokens_to_ids(s) for s in specials}


def build_whisper(folder: Path, shape: dict, tokens: int, device: str, dtype: torch.dtype,
                  alignment_heads: list[list[int]] = ALIGNMENT_HEADS) -> Path:
    """Write a random-weight Whisper of `shape` in the HF layout into folder; every decode emits
    exactly `tokens` text tokens (specials suppressed, min_new_tokens = tokens)."""
    import transformers

    tokenizer, ids = whisper_tokenizer(shape["vocab_size"])
    eos, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = transformers.WhisperConfig(**shape, pad_token_id=eos, bos_token_id=eos, eos_token_id=eos,
                                        decoder_start_token_id=sot)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.WhisperForConditionalGeneration._from_config(config, dtype=dtype).eval()
    heads = [h for h in alignment_heads if h[0] < shape["decoder_layers"] and h[1] < shape["decoder_attention_heads"]]
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eos, pad_token_id=eos, bos_token_id=eos,
        max_length=shape["max_target_positions"], is_multilingual=True, lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"],
        alignment_heads=heads or [[0, 0]], begin_index=4, min_new_tokens=tokens,
        suppress_tokens=[i for s, i in ids.items() if s != "<|endoftext|>"] + [tokenizer.convert_tokens_to_ids("Ġ")],
    )
    model.save_pretrained(folder)
    extractor = transformers.WhisperFeatureExtractor(feature_size=shape["num_mel_bins"])
    transformers.WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    del model
    return folder


def at_16k(paths: list[str]) -> list[str]:
    """The clips rewritten at 16 kHz (float WAV), so neither side resamples."""
    import soundfile as sf

    from sdscore.audio import load

    out = []
    for p in paths:
        target = p.replace(".wav", "-16k.wav")
        sf.write(target, load(p, RATE), RATE, subtype="FLOAT")
        out.append(target)
    return out


def ours(asr, paths: list[str], batch_size: int) -> list[str]:
    from sdscore.audio import load_many

    asr.batch_size = batch_size
    return asr.run(load_many(paths, RATE))["transcript"]


class PerFile:
    """The peer: librosa.load, the feature extractor and model.generate, one file at a time."""

    def __init__(self, folder: Path, device: str, tokens: int):
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        self.processor = WhisperProcessor.from_pretrained(folder, local_files_only=True)
        self.model = WhisperForConditionalGeneration.from_pretrained(folder, local_files_only=True).to(device).eval()
        self.device, self.tokens = device, tokens

    def run(self, paths: list[str]) -> list[str]:
        import librosa

        out = []
        for path in paths:
            x, _ = librosa.load(path, sr=RATE)
            feats = self.processor.feature_extractor(x, sampling_rate=RATE, return_tensors="pt",
                                                     return_attention_mask=True)
            with torch.inference_mode():
                gen = self.model.generate(feats.input_features.to(self.device, self.model.dtype),
                                          attention_mask=feats.attention_mask.to(self.device), task="transcribe",
                                          language="en", return_token_timestamps=True, return_dict_in_generate=True,
                                          max_new_tokens=self.tokens)
            text = self.processor.tokenizer.decode(gen["sequences"][0], skip_special_tokens=True)
            out.append(" ".join(text.split()))
        return out


def parameters(shape: dict) -> int:
    """Parameters of a Whisper of `shape` (weights and biases of both stacks, embeddings, no LM head:
    it is tied), within 1 % of transformers' count."""
    d, ffn, vocab = shape["d_model"], shape["encoder_ffn_dim"], shape["vocab_size"]
    attention, mlp, norms = 4 * d * d + 4 * d, 2 * d * ffn + ffn + d, 2 * d
    encoder = shape["encoder_layers"] * (attention + mlp + 2 * norms) + 3 * shape["num_mel_bins"] * d + 3 * d * d
    decoder = shape["decoder_layers"] * (2 * attention + mlp + 3 * norms)
    positions = (shape["max_source_positions"] + shape["max_target_positions"]) * d
    return encoder + decoder + vocab * d + positions


def refuse_if_too_big(shape: dict, dtype: torch.dtype, device: str) -> None:
    """On the CPU the bench holds the model three times at its peak (the copy it writes, ours and the
    peer's loads) plus the written file in the temp folder: refuse up front, with the figure, where
    that exceeds the memory available, instead of being killed by the kernel mid-run."""
    if device.startswith("cuda"):
        return
    try:
        available = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo")
                         if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return
    need = 4 * parameters(shape) * torch.empty(0, dtype=dtype).element_size()
    if need > 0.8 * available:
        raise SystemExit(f"bench/asr.py: this shape needs about {need / 2**30:.1f} GiB on the CPU (three copies of "
                         f"the model and its file) but {available / 2**30:.1f} GiB are available; use --shape base "
                         f"or a CUDA device")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--files", type=int, default=None,
                   help="files per round (default 32 on CUDA, 8 on the CPU; --quick 4)")
    p.add_argument("--shape", choices=sorted(SHAPES), default=None,
                   help="model shape (default: large-v3 on CUDA, base on the CPU, tiny with --quick on the CPU)")
    p.add_argument("--tokens", type=int, default=None, help="text tokens decoded per file, both sides (default 24)")
    args = p.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("bench/asr.py: --device cuda but torch sees no CUDA device")
    cuda = device.startswith("cuda")
    shape, label, heads = SHAPES[args.shape or ("large-v3" if cuda else "tiny" if args.quick else "base")]
    dtype = torch.float16 if cuda else torch.float32
    refuse_if_too_big(shape, dtype, device)
    n_files = args.files or (4 if args.quick else 32 if cuda else 8)
    tokens = args.tokens or (4 if args.quick else 24)
    rounds = args.repeats or 3
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    from sdscore.features.asr import make_asr

    hf_logging.set_verbosity_error()  # generate's max_length/min_length notes, once per call
    hf_logging.disable_progress_bar()

    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    with tempfile.TemporaryDirectory(prefix="sdscore-bench-asr-") as tmp:
        folder = Path(tmp)
        clips = at_16k(render_tts(folder, 24, (4, 14), 4, "clip"))  # bench/serve.py's clips
        paths = [clips[i % len(clips)] for i in range(n_files)]
        t0 = time.perf_counter()
        build_whisper(folder / "whisper", shape, tokens, device, dtype, heads)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        asr = make_asr("whisper", model_dir=str(folder / "whisper"), device=device, language="en",
                       max_new_tokens=tokens)
        peer = PerFile(folder / "whisper", device, tokens)
        loaded = time.perf_counter() - t0
        params = sum(x.numel() for x in asr.model.parameters())
        print(f"{label}: {params / 1e9:.2f} B parameters, {asr.model.dtype}, built and written in {built:.1f} s, "
              f"loaded twice in {loaded:.1f} s")
        outputs: dict[str, list[str]] = {}

        def keep(name, fn):
            def run() -> None:
                outputs[name] = fn()
            return run

        batches = [b for b in (8, 32) if b <= max(8, n_files)]
        runs = {f"ours, batch {b}": keep(f"ours, batch {b}", lambda b=b: ours(asr, paths, b)) for b in batches}
        runs["per file"] = keep("per file", lambda: peer.run(paths))
        seconds = interleaved_rounds(runs, rounds, sync=sync)
    for name in runs:
        if name != "per file":
            same = sum(a == b for a, b in zip(outputs[name], outputs["per file"]))
            print(f"{name}: {same}/{n_files} transcripts identical to the per-file peer's "
                  f"(each {len(outputs[name][0].split())} words)")
    rows = [rate_row(f"{label} ({str(dtype)[6:]}), {tokens} tokens/file: WhisperAsr {name[6:]} vs "
                     f"model.generate per file ({device})", "files/s", n_files, seconds[name], seconds["per file"])
            for name in runs if name != "per file"]
    report(f"asr: batched Whisper vs per-file generate; {n_files} files, {tokens} decoded tokens each on both "
           f"sides (random weights: decode length fixed), {rounds} interleaved rounds", rows, args.json,
           peers="model.generate per file, in this process (same torch pools as ours)")


if __name__ == "__main__":
    main()
