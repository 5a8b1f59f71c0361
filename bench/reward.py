"""Reward scoring throughput: RewardScorer vs the authors' processor loop, our one-by-one loop and a plain batched forward.

Same model, same pairs, same run, interleaved rounds (bench/common.py: every round times every
contender once, in turn; the ratio is the median of the per-round ratios). Pairs are shaped like
SDiaReward's: chosen and rejected share a context of 1 or 3 turns and differ in the final
assistant turn; every turn has text and its own TTS clip (flite and espeak-ng voices rendered into
a temp folder; no clip is shared by two pairs). The clips are rewritten at 16 kHz first, so no
side resamples (librosa's soxr and our resampler differ near Nyquist, which moves log-mel
features) and every contender's scores must agree with the one-by-one loop's: the max |difference|
is printed, so no speed-up can come from computing something else.

Peers, for the tiny random-weight model in SDiaReward's Qwen2.5-Omni thinker layout:
(a) the authors' processor loop: per episode, clips read with librosa and featurised as their
    processor does (Qwen2.5-Omni's Whisper front end pads every clip to 300 s: n_samples =
    300 x 16000), the thinker forward with feature_attention_mask, batch 1;
(b) our prepare + one-by-one loop: sdscore.audio.load per clip, model.prepare, one forward per
    episode (batch 1) — and the same loop in N worker processes (model loaded per process, one
    torch thread each, pairs split evenly, wall time of the whole) when ours runs on N threads;
(c) a plain Hugging Face batched forward: our loader and prepare, left-padded batches of ours'
    size in input order (no length bucketing, no prefix sharing), the thinker forward, torch mean
    pooling and the head.
Ours is `RewardScorer.score_pairs`, with pair-prefix sharing on and off. MFU counts USEFUL FLOPs
(`useful_flops`: no padding tokens, causal attention, the audio tower's real frames) per second of
ours, over the measured matmul rate of the device (bf16 on CUDA, fp32 on CPU) and over the spec
peak where known (H100 / H200 SXM bf16 dense: 989 TFLOP/s; CPU: n/a).

The shipped compact demo model gets the ours-vs-(b) row, and rows of its forward alone on CPU: the
fused packed forward the scorer runs vs the padded one, on length-bucketed and input-order batches,
with each one's useful GFLOP/s over the measured fp32 matmul rate (`compact_forward_rows`). On CUDA the tiny rows run on the GPU,
plus a random-weight model of Qwen2.5-Omni-3B's thinker shape in bf16 (built in memory): ours vs
(a), (b), (c) and its MFU — a code path that has not run yet (no GPU lent so far).
"""

from __future__ import annotations

import copy
import multiprocessing
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import WORDS, Row, interleaved_rounds, parser, rate_row, render_tts, report  # noqa: E402

from sdscore.models.base import Prepared, RewardModel, batch_to, left_padded_ids  # noqa: E402
from sdscore.models.episodes import Episode, Turn  # noqa: E402
from sdscore.models.loading import load_reward_model  # noqa: E402
from sdscore.runtime.reward.episode_scorer import RewardScorer  # noqa: E402

#: bf16 dense tensor-core peaks from the vendor's data sheets (SXM parts), FLOP/s
SPEC_PEAKS = {"H100": 989e12, "H200": 989e12}
#: the authors' processor pads every clip to this many seconds (Qwen2.5-Omni's chunk_length)
AUTHORS_CLIP_SECONDS = 300


def at_16k(paths: list[str]) -> list[str]:
    """The clips rewritten at 16 kHz, so both sides decode identical samples (no resampler differences)."""
    import soundfile as sf

    from sdscore.audio import load

    out = []
    for p in paths:
        target = p.replace(".wav", "-16k.wav")
        sf.write(target, load(p, 16000), 16000, subtype="FLOAT")
        out.append(target)
    return out


def make_pairs(paths: list[str], n_pairs: int, seed: int = 0) -> list[tuple[Episode, Episode]]:
    """(chosen, rejected) episodes shaped like SDiaReward pairs: a shared context of 1 or 3 turns
    ending with the user, then a different final assistant turn; no clip is used by two pairs."""
    rng = np.random.default_rng(seed)
    pool = iter(rng.permutation(paths).tolist())

    def turn(t: int) -> Turn:
        text = " ".join(rng.choice(WORDS, int(rng.integers(3, 12))))
        return Turn("user" if t % 2 == 0 else "assistant", text, next(pool))

    pairs = []
    for i in range(n_pairs):
        context = tuple(turn(t) for t in range(int(rng.choice([1, 3]))))
        chosen, rejected = turn(len(context)), turn(len(context))
        pairs.append((Episode(context + (chosen,), "modality", f"{i}/c"), Episode(context + (rejected,), "modality", f"{i}/r")))
    return pairs


CLIPS_PER_PAIR = 5  # at most: 3 context turns + 2 final turns


def _on_model(model: RewardModel, batch: dict[str, Any]) -> dict[str, Any]:
    """The batch on the model's device, floating tensors in its dtype (an adapter's index plan
    moved by its own .to), as the scorer moves it."""
    p = next(model.parameters())
    return batch_to(batch, p.device, p.dtype, non_blocking=False)


def _mean_pool_score(model: RewardModel, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """float32 [B]: torch mean pooling over attended positions, then the score head (what a user writes)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1).float() / m.sum(1).float()
    return model.head(pooled)


# ---- (b) our prepare, one episode at a time ---------------------------------------------------

def peer_loop(model: RewardModel, pairs: Sequence[tuple[Episode, Episode]]) -> np.ndarray:
    """Peer (b): per episode, sdscore.audio.load of each clip, model.prepare, a one-item batch,
    one forward. float [n, 2] (chosen, rejected) scores."""
    from sdscore.audio import load

    def one(e: Episode) -> float:
        waves = [None if t.audio is None else load(t.audio, model.sample_rate) for t in e.turns]
        batch = model.collate([model.prepare(e, waves)])
        with torch.inference_mode():
            return float(model(_on_model(model, batch))[0])

    return np.array([[one(c), one(r)] for c, r in pairs])


_WORKER: dict[str, object] = {}


def _worker_start(ckpt: str, base: str, max_batch: int, ready) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    _WORKER["model"] = load_reward_model(ckpt, base=base) if base else load_reward_model(ckpt)
    _WORKER["scorer"] = scorer_with_sharing(_WORKER["model"], True, device="cpu", max_batch=max_batch)
    ready.wait()


def _worker_loop(batched: bool, pairs: list[tuple[Episode, Episode]]) -> np.ndarray:
    if batched:
        return ours(_WORKER["scorer"], pairs)
    return peer_loop(_WORKER["model"], pairs)


#: how long ProcessLoop waits for its workers to load their models
STARTUP_SECONDS = 300


class ProcessLoop:
    """Peer (b) — or ours, batched with prefix sharing, `run(pairs, batched=True)` — in `processes`
    spawned worker processes, each with its own copy of the checkpoint at ckpt/base (base None: a
    folder that needs none, e.g. the compact model) and one torch thread; `run` splits the pairs
    evenly and returns scores in order."""

    def __init__(self, ckpt: str | Path, base: str | Path | None, processes: int, max_batch: int = 8):
        context = multiprocessing.get_context("spawn")
        ready = context.Barrier(processes + 1)
        self.processes = processes
        self.pool = context.Pool(processes, initializer=_worker_start,
                                 initargs=(str(ckpt), "" if base is None else str(base), max_batch, ready))
        try:  # every worker has loaded its model: the timed calls start warm
            ready.wait(timeout=STARTUP_SECONDS)
        except threading.BrokenBarrierError:  # a worker failed to start (its traceback is above): the pool
            self.pool.terminate()            # would respawn it forever
            raise SystemExit(f"bench/reward.py: the {processes} worker processes did not all load {ckpt} within "
                             f"{STARTUP_SECONDS} s (a failed worker's traceback is printed above)") from None

    def run(self, pairs: Sequence[tuple[Episode, Episode]], batched: bool = False) -> np.ndarray:
        chunks = [list(c) for c in np.array_split(np.arange(len(pairs)), self.processes) if len(c)]
        parts = self.pool.starmap(_worker_loop, [(batched, [pairs[i] for i in c]) for c in chunks], chunksize=1)
        return np.concatenate(parts)

    def close(self) -> None:
        self.pool.close()
        self.pool.join()

    def __enter__(self) -> ProcessLoop:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- (a) the authors' processor loop ------------------------------------------------------------

def authors_feature_extractor(model: RewardModel):
    """The model's Whisper feature extractor set to pad every clip to 300 s, as Qwen2.5-Omni's
    processor does (chunk_length=300, n_samples = 300 x 16000)."""
    fe = copy.deepcopy(model.feature_extractor)
    fe.chunk_length = AUTHORS_CLIP_SECONDS
    fe.n_samples = AUTHORS_CLIP_SECONDS * int(fe.sampling_rate)
    fe.nb_max_frames = fe.n_samples // int(fe.hop_length)
    return fe


def authors_loop(model: RewardModel, pairs: Sequence[tuple[Episode, Episode]], fe) -> np.ndarray:
    """Peer (a): per episode, librosa.load of each clip (their qwen_omni_utils), the chat text,
    the feature extractor over all clips padded to fe.n_samples with feature_attention_mask, one
    <|AUDIO|> token per encoder frame, the thinker forward at batch 1, mean pooling, the head."""
    import librosa

    from sdscore.models.sdiareward_qwen import audio_token_count

    def one(e: Episode) -> float:
        waves = [None if t.audio is None else librosa.load(t.audio, sr=model.sample_rate)[0] for t in e.turns]
        text, clips = model.render(e, waves)
        feats = fe(clips, sampling_rate=fe.sampling_rate, padding="max_length", return_attention_mask=True,
                   return_tensors="pt")
        if feats["input_features"].shape[-1] != fe.nb_max_frames:
            raise RuntimeError(f"the authors' front end gave {feats['input_features'].shape[-1]} frames, "
                               f"not {fe.nb_max_frames} (300 s)")
        frames = feats["attention_mask"].sum(-1)
        ids = torch.tensor(model.tokenizer(text)["input_ids"])
        repeats = torch.ones_like(ids)
        repeats[ids == model.audio_token_id] = torch.tensor([audio_token_count(int(f)) for f in frames])
        ids = torch.repeat_interleave(ids, repeats)[None]
        batch = _on_model(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                  "input_features": feats["input_features"],
                                  "feature_attention_mask": feats["attention_mask"]})
        with torch.inference_mode():
            hidden = model.backbone(**batch, use_cache=False).last_hidden_state
            return float(_mean_pool_score(model, hidden, batch["attention_mask"])[0])

    return np.array([[one(c), one(r)] for c, r in pairs])


# ---- (c) a plain Hugging Face batched forward -----------------------------------------------------

def hf_batched(model: RewardModel, pairs: Sequence[tuple[Episode, Episode]], batch_size: int) -> np.ndarray:
    """Peer (c): our threaded loader and prepare, then batches of `batch_size` episodes in input
    order, left-padded ids, clips padded to the batch's longest with feature_attention_mask, the
    thinker forward, torch mean pooling and the head."""
    from sdscore.audio import load_many

    episodes = [e for pair in pairs for e in pair]
    paths = sorted({t.audio for e in episodes for t in e.turns if t.audio is not None})
    audio = load_many(paths, model.sample_rate)
    slot = {p: i for i, p in enumerate(paths)}
    items = [model.prepare(e, [None if t.audio is None else audio[slot[t.audio]] for t in e.turns]) for e in episodes]
    scores = []
    for start in range(0, len(items), batch_size):
        chunk = items[start: start + batch_size]
        batch = left_padded_ids(chunk, model.pad_token_id)
        clips = [f for item in chunk for f in item.inputs["features"]]
        width = max(f.shape[1] for f in clips)
        batch["input_features"] = torch.stack([torch.nn.functional.pad(f, (0, width - f.shape[1])) for f in clips])
        batch["feature_attention_mask"] = (torch.arange(width)[None] < torch.tensor([f.shape[1] for f in clips])[:, None]).long()
        batch = _on_model(model, batch)
        with torch.inference_mode():
            hidden = model.backbone(**batch, use_cache=False).last_hidden_state
            scores.append(_mean_pool_score(model, hidden, batch["attention_mask"]).cpu())
    return torch.cat(scores).view(-1, 2).numpy()


# ---- ours ------------------------------------------------------------------------------------------

def ours(scorer: RewardScorer, pairs) -> np.ndarray:
    chosen, rejected = scorer.score_pairs(pairs)
    return torch.stack([chosen, rejected], 1).float().cpu().numpy()


def scorer_with_sharing(model: RewardModel, share: bool, **options) -> RewardScorer | None:
    """RewardScorer(share_prefixes=share); None (with a printed note) when this sdscore has no such
    option and sharing was asked for, a plain scorer when it was not."""
    try:
        return RewardScorer(model, share_prefixes=share, **options)
    except TypeError as error:
        if "share_prefixes" not in str(error):
            raise
        print(f"note: RewardScorer has no share_prefixes option yet ({error}); "
              f"{'the prefix-sharing rows are skipped' if share else 'the plain scorer runs'}")
        return None if share else RewardScorer(model, **options)


# ---- FLOPs and MFU -------------------------------------------------------------------------------

def lm_flops(text_config, length: int, causal: bool = True) -> int:
    """FLOPs of the language model over one unpadded sequence of `length` tokens: 2 x the layers'
    matmul weights per token, plus attention (QK^T and AV, 2 x 2 x d per query-key pair; causal:
    the L(L+1)/2 pairs a query sees, else L^2)."""
    h, inter, layers = int(text_config.hidden_size), int(text_config.intermediate_size), int(text_config.num_hidden_layers)
    heads, kv = int(text_config.num_attention_heads), int(text_config.num_key_value_heads)
    head_dim = int(getattr(text_config, "head_dim", None) or h // heads)
    q = heads * head_dim
    weights = h * q + 2 * h * kv * head_dim + q * h + 3 * h * inter
    pairs = length * (length + 1) // 2 if causal else length * length
    return layers * (2 * weights * length + 4 * q * pairs)


def audio_tower_flops(audio_config, frames: int) -> int:
    """FLOPs of Qwen2.5-Omni's audio tower over one clip of `frames` log-mel frames, as it runs:
    windows of 2 x n_window frames, conv1 (k=3) on the real frames, conv2 (k=3, stride 2), per
    layer the projections, the MLP and full attention within each window, then the stride-2
    average pooling and the output projection."""
    d, mels, ffn = int(audio_config.d_model), int(audio_config.num_mel_bins), int(audio_config.encoder_ffn_dim)
    layers, out, window = int(audio_config.encoder_layers), int(audio_config.output_dim), 2 * int(audio_config.n_window)
    chunks = [window] * (frames // window) + ([frames % window] if frames % window else [])
    after = [(c - 1) // 2 + 1 for c in chunks]
    tokens = sum(after)
    from sdscore.models.sdiareward_qwen import audio_token_count

    total = 2 * mels * d * 3 * frames + 2 * d * d * 3 * tokens
    total += layers * (2 * (4 * d * d + 2 * d * ffn) * tokens + 4 * d * sum(t * t for t in after))
    return total + 2 * d * out * audio_token_count(frames)


def useful_flops(model: RewardModel, items: Sequence[Prepared], causal: bool = True) -> int:
    """The FLOPs of scoring each prepared episode alone, unpadded: the audio tower over its clips'
    real frames, the language model over its tokens (`lm_flops`), the pooling (2 x L x H) and the
    head. Work prefix sharing skips still counts: this is the task's size, not what a given
    schedule executes."""
    config = model.backbone.config
    total = 0
    for item in items:
        total += sum(audio_tower_flops(config.audio_config, int(f.shape[1])) for f in item.inputs["features"])
        total += lm_flops(config.text_config, item.length, causal) + 2 * (item.length + 1) * model.hidden_size
    return total


def prepared_items(model: RewardModel, pairs: Sequence[tuple[Episode, Episode]]) -> list[Prepared]:
    from sdscore.audio import load

    return [model.prepare(e, [None if t.audio is None else load(t.audio, model.sample_rate) for t in e.turns])
            for pair in pairs for e in pair]


def counted_flops(fn: Callable[[], object]) -> int:
    """FLOPs of the torch ops fn() runs (matmuls, convolutions, attention), counted by
    torch.utils.flop_counter.FlopCounterMode (attention counted dense, padding included)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def matmul_flops_per_second(device: str, dtype: torch.dtype, n: int | None = None, repeats: int = 10) -> float:
    """The rate of an n x n x n matmul in `dtype` on `device` (best of `repeats`): the measured MFU
    denominator (n = 8192 on CUDA, 2048 on a CPU)."""
    n = n or (8192 if device == "cuda" else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def spec_peak(device: str, dtype: torch.dtype) -> float | None:
    """The data-sheet bf16 dense peak of the GPU, when its name is in SPEC_PEAKS; None otherwise."""
    if device != "cuda" or dtype != torch.bfloat16:
        return None
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in SPEC_PEAKS.items() if key in name), None)


def mfu_rows(name: str, flops: int, seconds: dict[str, list[float]], device: str, dtype: torch.dtype) -> list[Row]:
    """Useful GFLOP/s of each of our runs (median over rounds) against the measured matmul rate
    (ratio = MFU); the spec-peak MFU is printed (n/a when the peak is unknown)."""
    measured = matmul_flops_per_second(device, dtype)
    peak = spec_peak(device, dtype)
    rows = []
    for run, times in seconds.items():
        achieved = [flops / s for s in times]
        rows.append(Row(f"{name}: MFU of {run}, useful FLOPs vs measured {device} {str(dtype)[6:]} matmul",
                        "GFLOP/s", float(np.median(achieved)) / 1e9, measured / 1e9, [a / measured for a in achieved]))
        spec = "n/a" if peak is None else f"{float(np.median(achieved)) / peak:.1%} of {peak / 1e12:.0f} TFLOP/s"
        print(f"{name}, {run}: {flops / 1e9:.2f} useful GFLOP per pass; MFU over the spec peak: {spec}")
        if peak is not None:
            rows.append(Row(f"{name}: MFU of {run}, useful FLOPs vs {torch.cuda.get_device_name()} spec peak",
                            "GFLOP/s", float(np.median(achieved)) / 1e9, peak / 1e9, [a / peak for a in achieved]))
    return rows


def compact_flops(config, lengths: Sequence[int]) -> int:
    """Useful FLOPs of the compact model's forward over episodes of `lengths` tokens, each alone and
    unpadded: per layer 2 x the block's matmul weights per token (QKV, out, FF: 4D^2 + 2D·ff) and
    attention (QK^T and AV, 4·D per query-key pair, L^2 pairs: bidirectional), then mean pooling
    (2·L·D). The audio frame projection is not counted: prepare (inference=True) runs it, once per
    distinct clip."""
    d, ff = int(config.d_model), int(config.ff_size)
    total = 0
    for n in lengths:
        total += int(config.n_layers) * (2 * n * (4 * d * d + 2 * d * ff) + 4 * d * n * n) + 2 * n * d
    return total


def compact_forward_rows(name: str, model: RewardModel, pairs, rounds: int, max_batch: int) -> list[Row]:
    """The compact model's forward alone (CPU, float32), the fused packed forward that the scorer
    runs (inference_pooled) vs the padded one (hidden(attention="span") + the pooler), on the
    scorer's length-bucketed batches (plan_batches, as RewardScorer plans them) and on the same
    episodes in input order (ragged batches); and each one's useful GFLOP/s (compact_flops) over
    the measured fp32 matmul rate of this CPU."""
    from sdscore.audio import load
    from sdscore.runtime.batching import plan_batches

    episodes = [e for pair in pairs for e in pair]
    waves = [[None if t.audio is None else load(t.audio, model.sample_rate) for t in e.turns] for e in episodes]
    items = model.prepare_many(episodes, waves, inference=True)
    lengths = [item.length for item in items]
    flops = compact_flops(model.config, lengths)
    n = len(items)
    plans = {"bucketed": plan_batches(lengths, max_batch),
             "input-order": [list(range(i, min(i + max_batch, n))) for i in range(0, n, max_batch)]}
    rows = []
    for layout, plan in plans.items():
        batches = [model.collate([items[i] for i in chosen]) for chosen in plan]

        def fused(batches=batches) -> None:
            with torch.inference_mode():
                for batch in batches:
                    model.inference_pooled(batch)

        def padded(batches=batches) -> None:
            with torch.inference_mode():
                for batch in batches:
                    hidden, mask = model.hidden(batch, attention="span")
                    model.pooler(hidden, mask)

        seconds = interleaved_rounds({"fused": fused, "padded": padded}, rounds)
        tokens = sum(lengths) / sum(len(c) * max(lengths[i] for i in c) for c in plan)
        label = f"{name}, {layout} batches of <= {max_batch} ({tokens:.0%} of the padded cells are tokens)"
        rows.append(rate_row(f"{label}: fused packed forward vs padded forward (cpu, {torch.get_num_threads()} threads)",
                             "GFLOP/s", flops / 1e9, seconds["fused"], seconds["padded"]))
        rows += mfu_rows(label, flops, {"fused forward": seconds["fused"], "padded forward": seconds["padded"]},
                         "cpu", torch.float32)
    return rows


# ---- rows --------------------------------------------------------------------------------------

def _keep(outputs: dict[str, np.ndarray], name: str, fn: Callable[[], np.ndarray]) -> Callable[[], None]:
    def run() -> None:
        outputs[name] = fn()
    return run


def _hf_layers(model: RewardModel, fn: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """fn run with Hugging Face's own decoder layers (the peers (a) and (c) are plain transformers
    code): our fused decoder (models/fused_decoder.py) is switched off around it, then back on."""
    from sdscore.models.fused_decoder import decoder_is_fused, fuse_decoder, unfuse_decoder

    language_model = getattr(getattr(model, "backbone", None), "language_model", None)

    def run() -> np.ndarray:
        if language_model is None or not decoder_is_fused(language_model):
            return fn()
        unfuse_decoder(language_model)
        try:
            return fn()
        finally:
            fuse_decoder(language_model)
    return run


def _agreement(name: str, outputs: dict[str, np.ndarray], reference: str) -> None:
    for run, scores in outputs.items():
        if run != reference:
            diff = float(np.max(np.abs(scores - outputs[reference])))
            print(f"{name}, {run}: max |score - {reference} score| = {diff:.2e} over {len(scores)} pairs")


def model_rows(name: str, model: RewardModel, pairs, rounds: int, max_batch: int, device: str,
               authors_pairs: int, checkpoint: tuple[Path, Path | None] | None = None, full: bool = True) -> list[Row]:
    """Ours (prefix sharing on and off) against peers (b), (c) when full, (b) in N one-thread processes
    with ours run the same way (CPU, when a checkpoint is given and N > 1) and, when full, (a) on the
    first `authors_pairs` pairs and MFU rows.
    Every run's scores are compared with the one-by-one loop's."""
    n = len(pairs)
    unit = "pairs/s"
    scorers = {"ours, prefix sharing": scorer_with_sharing(model, True, device=device, max_batch=max_batch),
               "ours, no sharing": scorer_with_sharing(model, False, device=device, max_batch=max_batch)}
    scorers = {k: v for k, v in scorers.items() if v is not None}
    outputs: dict[str, np.ndarray] = {}
    runs = {k: _keep(outputs, k, lambda s=s: ours(s, pairs)) for k, s in scorers.items()}
    runs["(b) loop"] = _keep(outputs, "(b) loop", lambda: peer_loop(model, pairs))
    if full:
        runs["(c) HF batched"] = _keep(outputs, "(c) HF batched",
                                       _hf_layers(model, lambda: hf_batched(model, pairs, max_batch)))
    threads = torch.get_num_threads()
    procs = None
    loop_procs, ours_procs = f"(b) loop x{threads} processes", f"ours, prefix sharing, x{threads} one-thread processes"
    if device == "cpu" and checkpoint is not None and threads > 1:
        # the strongest CPU peer (the loop in one-thread processes), and ours run the same way
        # (what `--executor processes --workers N` does), so each side gets its best layout
        procs = ProcessLoop(*checkpoint, processes=threads, max_batch=max_batch)
        runs[loop_procs] = _keep(outputs, loop_procs, lambda: procs.run(pairs))
        runs[ours_procs] = _keep(outputs, ours_procs, lambda: procs.run(pairs, batched=True))
    try:
        seconds = interleaved_rounds(runs, rounds, sync=_sync(device))
    finally:
        if procs is not None:
            procs.close()
    _agreement(name, outputs, "(b) loop")
    rows = []
    for k in scorers:
        rows.append(rate_row(f"{name}: {k} vs (b) one-by-one loop ({device})", unit, n, seconds[k], seconds["(b) loop"]))
    if full:
        for k in scorers:
            rows.append(rate_row(f"{name}: {k} vs (c) HF batched, padded ({device})", unit, n, seconds[k],
                                 seconds["(c) HF batched"]))
    if procs is not None:
        for k in scorers:
            rows.append(rate_row(f"{name}: {k} ({threads} threads) vs {loop_procs}", unit, n, seconds[k],
                                 seconds[loop_procs]))
        rows.append(rate_row(f"{name}: {ours_procs} vs {loop_procs}", unit, n, seconds[ours_procs], seconds[loop_procs]))
    if not full:
        return rows
    dtype = next(model.parameters()).dtype
    rows += mfu_rows(name, useful_flops(model, prepared_items(model, pairs)), {k: seconds[k] for k in scorers}, device, dtype)
    rows += authors_rows(name, model, pairs[:authors_pairs], scorers, rounds, device)
    return rows


def authors_rows(name: str, model: RewardModel, pairs, scorers: dict[str, RewardScorer], rounds: int,
                 device: str) -> list[Row]:
    """Ours against peer (a), the authors' 300-s padded processor loop, on a subset of the pairs
    (it is slow: every clip costs a 300-s STFT)."""
    fe = authors_feature_extractor(model)
    outputs: dict[str, np.ndarray] = {}
    runs = {k: _keep(outputs, k, lambda s=s: ours(s, pairs)) for k, s in scorers.items()}
    runs["(a) authors' loop"] = _keep(outputs, "(a) authors' loop", _hf_layers(model, lambda: authors_loop(model, pairs, fe)))
    runs["(b) loop"] = _keep(outputs, "(b) loop", lambda: peer_loop(model, pairs))
    # no warm-up round (each call of (a) costs a 300-s STFT per clip): ours and (b) ran warm before,
    # and (a)'s one-off costs (librosa's import, the first STFT) are paid here
    authors_loop(model, pairs[:0], fe)
    fe([np.zeros(fe.sampling_rate, np.float32)], sampling_rate=fe.sampling_rate, padding="max_length")
    seconds = interleaved_rounds(runs, rounds, warm_up=False, sync=_sync(device))
    subset = f"{len(pairs)} pair{'s' if len(pairs) != 1 else ''}"
    _agreement(f"{name} ({subset})", outputs, "(b) loop")
    return [rate_row(f"{name}: {k} vs (a) authors' processor loop, 300-s clips ({device}, {subset})",
                     "pairs/s", len(pairs), seconds[k], seconds["(a) authors' loop"]) for k in scorers]


def _sync(device: str) -> Callable[[], None] | None:
    return torch.cuda.synchronize if device == "cuda" else None


def compact_model() -> RewardModel:
    from sdscore.models.pretrained import default_model_dir

    return load_reward_model(default_model_dir())


def tiny_qwen_checkpoint(folder: Path) -> tuple[Path, Path]:
    from tiny_reward_models import build_tiny_sdiareward

    return build_tiny_sdiareward(folder / "ckpt", folder / "base")


def omni_3b_model(folder: Path, device: str) -> RewardModel:
    """SDiaReward adapter over a random bf16 thinker of Qwen2.5-Omni-3B's shape, on `device`; the
    tokenizer, feature extractor, chat template and system prompt come from the tiny layout."""
    from tiny_reward_models import OMNI_3B_SIZES, build_tiny_sdiareward, tiny_thinker_config
    from transformers import Qwen2_5OmniThinkerModel

    from sdscore.models.sdiareward_qwen import SDiaRewardQwenOmni

    ckpt, base = build_tiny_sdiareward(folder / "ckpt-3b", folder / "base-3b")
    tiny = load_reward_model(ckpt, base=base)
    config = tiny_thinker_config(tiny.tokenizer, OMNI_3B_SIZES)
    with torch.device(device):
        backbone = Qwen2_5OmniThinkerModel._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = SDiaRewardQwenOmni(backbone, tiny.tokenizer, tiny.feature_extractor, tiny.chat_template,
                               tiny.system_prompt)
    return model.to(device=device, dtype=torch.bfloat16).eval()


def paths_main(args, rounds: int, device: str, pairs, folder: Path) -> None:
    """--paths: only the A/B rows of varlen vs padded continuations and fused vs unfused decoder
    (bench/reward_paths.py) on the tiny model, a small fp32 one and, on CUDA, the 3B-shaped bf16 one."""
    from reward_paths import forward_rows, path_rows, small_model

    checkpoint = tiny_qwen_checkpoint(folder)
    models = {"tiny SDiaReward-layout model": lambda: load_reward_model(checkpoint[0], base=checkpoint[1]),
              "small model (H=512, 4 layers, fp32)": lambda: small_model(folder, device)}
    if device == "cuda":
        models["Qwen2.5-Omni-3B-shaped model (bf16)"] = lambda: omni_3b_model(folder, device)
    rows = []
    for name, build in models.items():
        model = build()
        rows += path_rows(name, model, pairs, rounds, 8, device, _sync(device))
        rows += forward_rows(name, model, pairs, rounds, 8, device, _sync(device))
        del model
    report(f"reward paths: varlen vs padded continuation, fused vs unfused decoder; {rounds} interleaved rounds",
           rows, args.json, peers="our own padded / unfused path in this process")


def main() -> None:
    cli = parser(__doc__.splitlines()[0])
    cli.add_argument("--realistic", action="store_true",
                     help="only the realistic-shape rows: 3B- and 7B-shaped bf16 models (CUDA), 30-s and mixed "
                          "clips, a ~450-token system prompt (bench/reward_realistic.py; without CUDA: tiny sizes)")
    cli.add_argument("--paths", action="store_true",
                     help="only compare the continuation layouts (varlen/padded) and the decoder (fused/unfused)")
    args = cli.parse_args()
    rounds = args.repeats or 3
    device = "cuda" if torch.cuda.is_available() else "cpu"
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="sdscore-bench-") as folder:
        n_pairs = 16 if args.quick else 96
        paths = render_tts(Path(folder), CLIPS_PER_PAIR * n_pairs, words=(3, 14), espeak_every=3, prefix="r")
        clips = at_16k(paths)
        pairs = make_pairs(clips, n_pairs)
        if args.realistic:
            from reward_realistic import realistic_rows

            rows = realistic_rows(clips, Path(folder), device, rounds, args.quick)
            report(f"reward at realistic shapes: batched scoring vs (a), (b), (c); {rounds} interleaved rounds",
                   rows, args.json, peers="(a), (b), (c) in this process (the pools listed above)")
            return
        if args.paths:
            return paths_main(args, rounds, device, pairs[: 8 if args.quick else 32], Path(folder))
        compact = compact_model()
        rows = compact_forward_rows("compact demo model", compact, pairs, rounds, 16)
        from sdscore.models.pretrained import default_model_dir

        rows += model_rows("compact demo model", compact, pairs, rounds, 16, device, 0,
                           checkpoint=(default_model_dir(), None), full=False)
        qwen_pairs = pairs[: 8 if args.quick else 24]
        authors_pairs = 1 if args.quick else 6
        checkpoint = tiny_qwen_checkpoint(Path(folder))
        tiny = load_reward_model(checkpoint[0], base=checkpoint[1])
        rows += model_rows("tiny SDiaReward-layout model", tiny, qwen_pairs, rounds, 8, device, authors_pairs, checkpoint)
        if device == "cuda":  # unverified: no GPU has been lent to this project yet
            big = omni_3b_model(Path(folder), device)
            rows += model_rows("Qwen2.5-Omni-3B-shaped model (bf16)", big, qwen_pairs, rounds, 8, device, authors_pairs)
    report(f"reward: batched scoring vs the authors' loop, the one-by-one loop and a batched HF forward; "
           f"{rounds} interleaved rounds", rows, args.json,
           peers="(a) the authors' processor loop, (b) the one-by-one loop and (c) a padded HF forward in this "
                 "process (the pools listed above); '(b) in N processes' rows: N spawned processes of 1 torch thread")


if __name__ == "__main__":
    main()
