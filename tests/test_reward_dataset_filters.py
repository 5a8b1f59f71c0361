"""SDiaReward's Phase-1 filters: each rule drops what it should and is counted under its reason."""

from __future__ import annotations

import numpy as np
import polars as pl
import soundfile as sf
from sdscore.corpus.schemas import REWARD_PAIRS
from sdscore.protocols.reward.dataset_filters import filter_pairs


def _turns(roles, paths):
    return [{"role": r, "text": "hi", "audio_path": p} for r, p in zip(roles, paths)]


def test_each_rule_by_hand(tmp_path):
    short, long = tmp_path / "short.wav", tmp_path / "long.wav"
    sf.write(short, np.zeros(16000, np.float32), 16000)
    sf.write(long, np.zeros(16000 * 61, np.float32), 16000)
    ok = _turns(["user", "assistant"], [str(short)] * 2)
    rows = {
        "keep": (ok, ok),
        "keep-system": (_turns(["system", "user", "assistant"], [None, str(short), str(short)]), ok),
        "odd": (_turns(["user", "assistant", "user"], [str(short)] * 3), ok),
        "order": (ok, _turns(["assistant", "user"], [str(short)] * 2)),
        "many": (_turns(["user", "assistant"] * 9, [str(short)] * 18), ok),
        "long": (ok, _turns(["user", "assistant"], [str(short), str(long)])),
        "missing": (_turns(["user", "assistant"], [str(short), str(tmp_path / "gone.wav")]), ok),
    }
    pairs = pl.DataFrame([{"pair_id": k, "criterion": "modality", "chosen": c, "rejected": r}
                          for k, (c, r) in rows.items()], schema=REWARD_PAIRS)
    kept, dropped = filter_pairs(pairs)
    assert kept["pair_id"].to_list() == ["keep", "keep-system"]
    assert dropped == {"odd number of turns": 1, "roles do not alternate user/assistant": 1,
                       "more than 16 turns": 1, "a turn longer than 60 s": 1, "audio unreadable": 1}
    kept, dropped = filter_pairs(pairs, max_turn_seconds=None)  # no header reads
    assert set(kept["pair_id"]) == {"keep", "keep-system", "long", "missing"}


def test_cli(tmp_path):
    from sdscore.cli import main

    ok = _turns(["user", "assistant"], [None, None])
    pairs = pl.DataFrame([{"pair_id": "a", "criterion": "modality", "chosen": ok, "rejected": ok},
                          {"pair_id": "b", "criterion": "modality", "chosen": ok[:1], "rejected": ok}],
                         schema=REWARD_PAIRS)
    pairs.write_parquet(tmp_path / "p.parquet")
    assert main(["corpus", "filter-sdiareward", str(tmp_path / "p.parquet"), "--out", str(tmp_path / "k.parquet"),
                 "--no-durations"]) == 0
    assert pl.read_parquet(tmp_path / "k.parquet")["pair_id"].to_list() == ["a"]
