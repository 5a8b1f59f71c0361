"""bench/reward.py --paths (bench/reward_paths.py), run on a CPU so the GPU run cannot trip on it:
every variant (varlen/padded continuation x fused/unfused decoder) scores the same pairs alike,
and the model is left on the new path (varlen + fused) afterwards."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
pytest.importorskip("transformers")


def test_path_rows_compare_every_variant_and_restore_the_model(tmp_path, capsys):
    import reward_paths
    from tiny_reward_models import build_tiny_sdiareward

    from sdscore.models.episodes import Episode, Turn
    from sdscore.models.fused_decoder import decoder_is_fused
    from sdscore.models.loading import load_reward_model

    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base)
    rng = np.random.default_rng(0)
    import soundfile as sf

    def clip(name, seconds):
        path = tmp_path / f"{name}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32), 16000)
        return str(path)

    pairs = []
    for i in range(2):
        context = (Turn("user", f"question {i}", clip(f"q{i}", 0.6)),)
        pairs.append((Episode(context + (Turn("assistant", "a long answer " * 3, clip(f"a{i}", 0.8)),), "modality",
                              f"{i}/c"),
                      Episode(context + (Turn("assistant", "no", clip(f"b{i}", 0.3)),), "modality", f"{i}/r")))
    rows = reward_paths.path_rows("tiny", model, pairs, 1, 4, "cpu")
    rows += reward_paths.forward_rows("tiny", model, pairs, 1, 4, "cpu")
    assert len(rows) == 6 and all(r.ours > 0 and r.peer > 0 for r in rows)
    printed = capsys.readouterr().out
    for variant in reward_paths.VARIANTS:
        diff = float(printed.split(f"tiny, {variant}: max |score - varlen + fused score| = ")[1].split()[0])
        assert diff < 1e-5, variant
    assert model.continuation_layout == "varlen" and decoder_is_fused(model.backbone.language_model)
