"""Train the bundled demo reward model (engine/sdscore/models/pretrained/compact-synth) from scratch.

    .venv/bin/python bench/train_demo_model.py [--work DIR] [--out DIR] [--seed 0]

1. Renders synthetic reward pairs (sdscore.synth) from the TRAIN dialogues (every 5th dialogue of
   the bank held out), seed `--seed`; a held-out-by-pair_id-hash tenth of them picks the best
   checkpoint (eval loss), as SDiaReward does with its validation split.
2. Renders a test set from the HELD-OUT dialogues with another seed: texts the model never saw.
3. Trains the compact model (CPU), reports held-out accuracy per subset, and writes it into the
   model card together with the data, seed, steps and training time.

The TTS renders are content-addressed, so a second run reuses the audio under --work.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sdscore.corpus import write_manifest
from sdscore.manifests import read_manifest, validate_manifest
from sdscore.models.compact import CompactConfig, CompactRewardModel
from sdscore.models.training import TrainConfig, evaluate_pairs, prepare_pairs, train_reward
from sdscore.synth.render import Renderer
from sdscore.synth.reward_pairs import HELDOUT_EVERY, build_reward_pairs, reward_dialogues

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "engine" / "sdscore" / "models" / "pretrained" / "compact-synth"


def build_pairs(work: Path, split: str, seed: int, n_modality: int, n_colloquial: int) -> Path:
    """Render the reward pairs of one dialogue split into work/ and write reward_<split>.parquet."""
    manifest = work / f"reward_{split}_seed{seed}_{n_modality}_{n_colloquial}.parquet"
    if not manifest.exists():
        renderer = Renderer(work, progress=lambda stage, done, total: print(f"\r{split} {stage}: {done}/{total}", end=""))
        frame, _ = build_reward_pairs(renderer, np.random.default_rng(seed), n_modality, n_colloquial, split)
        write_manifest(validate_manifest(frame, "reward"), manifest)
        print()
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=ROOT / "build" / "demo-reward", help="render cache and manifests")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-pairs", type=int, nargs=2, default=(400, 200), metavar=("MODALITY", "COLLOQUIAL"))
    p.add_argument("--test-pairs", type=int, nargs=2, default=(160, 80), metavar=("MODALITY", "COLLOQUIAL"))
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=25)
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    args.work.mkdir(parents=True, exist_ok=True)
    test_seed = args.seed + 1000
    train_manifest = build_pairs(args.work, "train", args.seed, *args.train_pairs)
    test_manifest = build_pairs(args.work, "heldout", test_seed, *args.test_pairs)
    train, test = read_manifest(train_manifest, "reward"), read_manifest(test_manifest, "reward")

    model = CompactRewardModel.from_config(CompactConfig(), seed=args.seed)
    config = TrainConfig(lr=args.lr, batch_size=args.batch_size, epochs=args.epochs, eval_every=args.eval_every,
                         eval_fraction=0.1, seed=args.seed)
    started = time.perf_counter()
    summary = train_reward(model, train, None, args.work / "run", config,
                           progress=lambda stage, done, total: print(f"\r{stage}: {done}/{total}", end="", flush=True))
    print()
    train_s = time.perf_counter() - started

    held = prepare_pairs(model, test)
    result = evaluate_pairs(model, held, config, torch.device("cpu"))
    held.subsets = test["category"].to_list()
    by_category = evaluate_pairs(model, held, config, torch.device("cpu"))["by_subset"]
    modality = [s for s in result["by_subset"] if s != "colloquial"]
    n_mod = sum(result["by_subset"][s]["pairs"] for s in modality)
    modality_micro = sum(result["by_subset"][s]["accuracy"] * result["by_subset"][s]["pairs"] for s in modality) / max(1, n_mod)
    card = {
        "name": "compact-synth",
        "description": (f"Demo reward model of sdscore: a {model.config.n_layers}-layer, d={model.config.d_model} "
                        f"byte-patch + log-mel transformer ({sum(q.numel() for q in model.parameters())} parameters) "
                        "trained from scratch on sdscore's synthetic TTS corpus. It separates natural from "
                        "robotic/degraded TTS voices and spoken from written text of that corpus; it is a demo, "
                        "NOT a model of human preferences, and says nothing reliable about real speech."),
        "data": {
            "generator": "sdscore.synth.reward_pairs.build_reward_pairs",
            "train": {"split": "train", "seed": args.seed, "modality_pairs": args.train_pairs[0],
                      "colloquial_pairs": args.train_pairs[1], "dialogues": len(reward_dialogues("train"))},
            "heldout_test": {"split": "heldout", "seed": test_seed, "modality_pairs": args.test_pairs[0],
                             "colloquial_pairs": args.test_pairs[1], "dialogues": len(reward_dialogues("heldout")),
                             "rule": f"every {HELDOUT_EVERY}th dialogue of the bank; never seen in training"},
        },
        "seed": args.seed,
        "steps": summary["steps"],
        "best_step": summary["best_step"],
        "training_seconds_cpu": round(train_s, 1),
        "heldout_accuracy": {
            "overall": result["accuracy"],
            "modality_micro": modality_micro,
            "by_subset": result["by_subset"],
            "by_category": by_category,
            "note": "'training.eval_*' is the in-distribution validation split that picked the checkpoint",
        },
        "reproduce": "python bench/train_demo_model.py --seed " + str(args.seed),
    }
    model.save_pretrained(args.out, card=card)  # just the two files: the training log stays in --work/run
    print(json.dumps({"summary": summary, "heldout": card["heldout_accuracy"], "training_seconds": train_s}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
