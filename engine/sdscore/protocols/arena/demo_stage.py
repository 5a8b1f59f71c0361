"""`sdscore demo`'s arena stage: the protocol on bundled defaults over the synthetic corpus."""

from __future__ import annotations

import json
from pathlib import Path

from sdscore.progress import Progress

#: the synthetic corpus's manifest of this protocol (`sdscore synth` writes it)
CORPUS_MANIFEST = "battles.parquet"
#: the stage's place among the demo's stages (its report section's too)
ORDER = 4
#: the report's inputs under the demo folder: (results files, METRICS.json); paths relative to it
REPORT_INPUTS = (("corpus/battles.parquet",), "arena/metrics.json")


def run(corpus: Path, out: Path, progress: Progress) -> dict:
    from scipy.stats import spearmanr

    from sdscore.protocols.arena import run_eval

    progress("arena: ratings", 0, 1)
    metrics = run_eval(corpus / "battles.parquet", out / "arena" / "metrics.json", n_boot=200)
    progress("arena: ratings", 1, 1)
    truth = json.loads((corpus / "corpus.json").read_text())["truth"]["arena"]["effective_theta"]
    models = sorted(truth)
    rho = spearmanr([truth[m] for m in models], [metrics["bradley_terry"][m]["rating"] for m in models])[0]
    top = next(iter(metrics["bradley_terry"]))
    return {
        "protocol": "arena",
        "title": "Bradley–Terry and Elo over the synthetic battles (known true strengths)",
        "headline": {
            "battles": metrics["n_battles"],
            "top model (BT)": top,
            "Spearman(BT, true strength)": float(rho),
            "first-position win rate": metrics["position_bias"]["first_position_win_rate"],
            "swap flip rate": metrics["position_bias"]["swap_flip_rate"],
            "longer-response win rate": (metrics["length_bias"] or {}).get("longer_win_rate"),
        },
        "outputs": [str(out / "arena" / "metrics.json")],
    }
