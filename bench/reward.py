"""Reward scoring throughput: RewardScorer vs the authors' one-sample-at-a-time evaluator loop.

Same model, same pairs, same run. Pairs are shaped like SDiaReward's: chosen and rejected share a
context of 1 or 3 turns and differ in the final assistant turn; every turn has text and its own
TTS clip (flite and espeak-ng voices rendered into a temp folder; no clip is shared by two pairs). The peer does what
SDiaReward's eval_model.py does per pair: load each clip with librosa at 16 kHz, build the
inputs of one episode, forward it alone, then the rejected one — batch 1, no overlap. Ours is
`RewardScorer.score_pairs` (threaded load_many, a pair's two episodes in one window so their
context clips are featurised once, length-bucketed batches; prefetch overlapping the forward on
CUDA), in one process (worker processes and Ray actors over a whole manifest are the runtime's
executors, measured by bench/scale.py). The clips
are rewritten at 16 kHz first, so neither side resamples (espeak-ng renders at
22.05 kHz, and librosa's soxr and our resampler differ near Nyquist, which moves log-mel features)
and the two score lists must agree: the max |difference| is printed, so the speed-up cannot come
from computing something else.

Models: the shipped compact demo model, and a tiny random-weight model in SDiaReward's
Qwen2.5-Omni thinker layout (its processor pads each clip to 30 s, as theirs does). On CUDA the
same rows run on the GPU (bf16 for the scorer, as the authors' evaluator uses bf16 there too),
plus a random-weight model of Qwen2.5-Omni-3B's thinker shape in bf16 (its 3.09 B-parameter
language model and 0.64 B audio tower; built in memory, no checkpoint): the scorer against the
loop, and its MFU — the FLOPs of one scoring pass (counted by torch.utils.flop_counter over the
actual forward, padding included) per second, over the rate of a large bf16 matmul measured on
the same GPU in the same run.
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import WORDS, Row, best_seconds, parser, render_tts, report  # noqa: E402

from sdscore.models.base import RewardModel  # noqa: E402
from sdscore.models.episodes import Episode, Turn  # noqa: E402
from sdscore.models.loading import load_reward_model  # noqa: E402
from sdscore.runtime.reward.episode_scorer import RewardScorer  # noqa: E402


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


def peer_loop(model: RewardModel, pairs: list[tuple[Episode, Episode]], loader: str = "librosa") -> np.ndarray:
    """The authors' evaluator shape: per episode, load each clip (librosa, as their
    qwen_omni_utils does, or sdscore.audio.load), one-item batch, one forward."""
    import librosa

    from sdscore.audio import load

    def read(path: str) -> np.ndarray:
        return librosa.load(path, sr=model.sample_rate)[0] if loader == "librosa" else load(path, model.sample_rate)

    def one(e: Episode) -> float:
        waves = [None if t.audio is None else read(t.audio) for t in e.turns]
        batch = model.collate([model.prepare(e, waves)])
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        batch = {k: v.to(device, dtype=dtype if v.is_floating_point() else None) for k, v in batch.items()}
        with torch.inference_mode():
            return float(model(batch)[0])

    return np.array([[one(c), one(r)] for c, r in pairs])


def ours(scorer: RewardScorer, pairs) -> np.ndarray:
    chosen, rejected = scorer.score_pairs(pairs)
    return torch.stack([chosen, rejected], 1).float().cpu().numpy()


def interleaved(runs: dict[str, Callable[[], np.ndarray]], repeats: int) -> dict[str, tuple[float, np.ndarray]]:
    """Best wall time and result of each run over `repeats` rounds, every round timing each run
    once in turn: slow drift of a shared VM then lands on both sides of a ratio alike."""
    best: dict[str, tuple[float, np.ndarray]] = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            out = fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, out)
    return best


def model_rows(name: str, model: RewardModel, pairs, repeats: int, max_batch: int, device: str) -> list[Row]:
    """Rows of the in-process scorer against the one-by-one loop (with librosa, and with our loader);
    every run's scores are compared with the loop's."""
    n = len(pairs)
    scorer = RewardScorer(model, device=device, max_batch=max_batch)
    peer_loop(model, pairs[:2])  # warm-up: lazy imports, first forwards
    ours(scorer, pairs[:4])
    runs = {
        "ours": lambda: ours(scorer, pairs),
        "peer": lambda: peer_loop(model, pairs),
        "peer, our loader": lambda: peer_loop(model, pairs, loader="sdscore"),
    }
    best = interleaved(runs, repeats)
    seconds = {k: v[0] for k, v in best.items()}
    expected = best["peer"][1]
    for run in ("ours", "peer, our loader"):
        print(f"{name}, {run}: max |score - loop score| = {float(np.max(np.abs(best[run][1] - expected))):.2e} "
              f"over {n} pairs")
    return [
        Row(f"{name}: score_pairs vs one-by-one loop, librosa ({device})", "pairs/s", n / seconds["ours"],
            n / seconds["peer"]),
        Row(f"{name}: score_pairs vs one-by-one loop, our loader ({device})", "pairs/s", n / seconds["ours"],
            n / seconds["peer, our loader"]),
    ]


def compact_model() -> RewardModel:
    from sdscore.models.pretrained import default_model_dir

    return load_reward_model(default_model_dir())


def tiny_qwen_model(folder: Path) -> RewardModel:
    from tiny_reward_models import build_tiny_sdiareward

    build_tiny_sdiareward(folder / "ckpt", folder / "base")
    return load_reward_model(folder / "ckpt", base=folder / "base")


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


def counted_flops(fn: Callable[[], object]) -> int:
    """FLOPs of the torch ops fn() runs (matmuls, convolutions, attention), counted by
    torch.utils.flop_counter.FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def matmul_flops_per_second(device: str, dtype: torch.dtype = torch.bfloat16, n: int = 8192, repeats: int = 20) -> float:
    """The rate of an n x n x n matmul in `dtype` on `device` (best of `repeats`): the MFU denominator."""
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


def mfu_row(name: str, model: RewardModel, pairs, repeats: int, max_batch: int, device: str) -> Row:
    """Achieved FLOP/s of score_pairs (counted FLOPs / best time) against the measured matmul rate."""
    scorer = RewardScorer(model, device=device, max_batch=max_batch)
    ours(scorer, pairs)  # warm-up
    flops = counted_flops(lambda: ours(scorer, pairs))
    seconds = best_seconds(lambda: ours(scorer, pairs), repeats)
    peak = matmul_flops_per_second(device, next(model.parameters()).dtype)
    return Row(f"{name}: achieved vs {device} matmul TFLOP/s (ratio = MFU)", "TFLOP/s", flops / seconds / 1e12, peak / 1e12)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="sdscore-bench-") as folder:
        n_pairs = 24 if args.quick else 96
        paths = render_tts(Path(folder), CLIPS_PER_PAIR * n_pairs, words=(3, 14), espeak_every=3, prefix="r")
        pairs = make_pairs(at_16k(paths), n_pairs)
        rows = model_rows("compact demo model", compact_model(), pairs, repeats, 16, device)
        qwen_pairs = pairs[: 6 if args.quick else 24]
        rows += model_rows("tiny SDiaReward-layout model", tiny_qwen_model(Path(folder)), qwen_pairs, repeats, 8, device)
        if device == "cuda":  # unverified: no GPU has been lent to this project yet
            name = "Qwen2.5-Omni-3B-shaped model (bf16)"
            big = omni_3b_model(Path(folder), device)
            rows += model_rows(name, big, qwen_pairs, repeats, 8, device)
            rows.append(mfu_row(name, big, qwen_pairs, repeats, 8, device))
    report("reward: batched scoring vs the one-sample evaluator loop", rows, args.json)


if __name__ == "__main__":
    main()
