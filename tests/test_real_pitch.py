"""Pitch on recorded human voices, end to end against Praat, with a held-out half.

The reference is what a user of Praat gets from the file: ``parselmouth.Sound(path)`` (Praat's
own decoder; channels averaged) and ``to_pitch()`` with Praat's defaults (floor 75 Hz, ceiling
600 Hz), median over its voiced frames. Ours is the blueprint's path: ``load_many`` at 16 kHz and
the ``pitch`` extractor with its defaults. Nothing is filtered on either side: every file of a
half counts, and a file where we report no pitch counts as a miss.

The recordings: tests/data/real/*.wav (the project's older set, wideband ones only) and
tests/data/real/voices/ (sources in tests/data/real/README.md, speakers in voices/speakers.csv).
The split is by speaker, fixed before any measurement: a voices/ speaker is held out when the
first byte of sha256(speaker id) is odd; the older files are all tuning files (the earlier
confidence threshold was chosen on them). The pitch thresholds were chosen on the tuning half
only; the criterion (MEDIAN_REL on at least SHARE of the files) is tested on the held-out half.
``python tests/test_real_pitch.py`` prints both halves, and TRACE's 80-300 Hz band against
Praat's ``to_pitch(80, 300)`` for comparison.
"""

from __future__ import annotations

import csv
import hashlib
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from sdscore.audio import load_many
from sdscore.features.extract import extract
from sdscore.features.pitch import YinPitch

parselmouth = pytest.importorskip("parselmouth")

REAL = Path(__file__).resolve().parent / "data" / "real"
VOICES = REAL / "voices"
RATE = 16000
MEDIAN_REL = 0.03
SHARE = 0.95
MIN_SECONDS = 1.0  # shorter clips (studio_example_short, 0.46 s) are too short for a median


def speakers() -> dict[str, dict]:
    with open(VOICES / "speakers.csv", newline="") as fh:
        return {row["file"]: row for row in csv.DictReader(fh)}


def held_out(speaker: str) -> bool:
    return hashlib.sha256(speaker.encode()).digest()[0] % 2 == 1


def halves() -> dict[str, list[Path]]:
    """{"tuning": [...], "held_out": [...]}: wideband files of at least MIN_SECONDS."""
    out: dict[str, list[Path]] = {"tuning": [], "held_out": []}
    for path in sorted(REAL.glob("*.wav")):
        info = sf.info(str(path))
        if info.samplerate >= 16000 and info.duration >= MIN_SECONDS:
            out["tuning"].append(path)
    for name, row in sorted(speakers().items()):
        out["held_out" if held_out(row["speaker"]) else "tuning"].append(VOICES / name)
    return out


def praat_median(path: Path, floor: float = 75.0, ceiling: float = 600.0) -> float:
    sound = parselmouth.Sound(str(path))
    if sound.n_channels > 1:
        sound = sound.convert_to_mono()
    f0 = sound.to_pitch(pitch_floor=floor, pitch_ceiling=ceiling).selected_array["frequency"]
    return float(np.median(f0[f0 > 0]))


@cache
def figures(half: str, fmin: float = 75.0, fmax: float = 600.0) -> tuple[dict, ...]:
    paths = halves()[half]
    batch = load_many([str(p) for p in paths], sample_rate=RATE)
    options = {} if (fmin, fmax) == (75.0, 600.0) else {"pitch": {"fmin": fmin, "fmax": fmax}}
    ours = extract(["pitch"], batch, **options)["pitch_median_hz"].to_list()
    rows = []
    for path, error, median in zip(paths, batch.errors, ours):
        ref = praat_median(path, fmin, fmax)
        rel = median / ref - 1 if error is None and median is not None else float("inf")
        rows.append({"file": path.name, "ours": median, "praat": ref, "rel": rel, "error": error})
    return tuple(rows)


def summary(rows) -> dict:
    rel = np.array([abs(r["rel"]) for r in rows])
    worst = max(rows, key=lambda r: abs(r["rel"]))
    return {"files": len(rows), "share": float(np.mean(rel <= MEDIAN_REL)),
            "mean_abs": float(np.mean(rel)), "worst": (worst["file"], worst["rel"])}


# ------------------------------------------------------------------ tests


def test_every_voice_names_its_source_and_speaker():
    listed = (REAL / "README.md").read_text()
    files = sorted(p.name for p in VOICES.glob("*.flac"))
    assert files and sorted(speakers()) == files, "voices/speakers.csv lists every clip, and only those"
    missing = [name for name in files if name not in listed]
    assert not missing, f"not in tests/data/real/README.md: {missing}"
    for name in files:
        info = sf.info(str(VOICES / name))
        assert info.samplerate >= 16000 and info.duration <= 6.0, name


def test_the_split_is_by_speaker_and_the_held_out_half_is_varied():
    rows = speakers()
    held = [r for r in rows.values() if held_out(r["speaker"])]
    tuning = [r for r in rows.values() if not held_out(r["speaker"])]
    assert not {r["speaker"] for r in held} & {r["speaker"] for r in tuning}
    assert len(halves()["held_out"]) >= 15
    assert len({r["speaker"] for r in held}) >= 12
    assert len({r["language"] for r in held}) >= 8
    assert {"female", "male"} <= {r["sex"].split()[0] for r in held}


def test_held_out_median_f0_within_three_percent_of_praat_end_to_end():
    rows = figures("held_out")
    assert not [r for r in rows if r["error"]], "every held-out file loads"
    result = summary(rows)
    misses = [(r["file"], f"{100 * r['rel']:+.1f}%") for r in rows if abs(r["rel"]) > MEDIAN_REL]
    assert result["share"] >= SHARE, f"{result['share']:.1%} of {result['files']} within 3 %; misses {misses}"


def test_praat_voicing_rule_is_what_brings_tuning_files_in():
    """The same tracker with the Praat voicing rule off misses more tuning clips of voices/
    (klettres_da among them); with it on, only ktuberling_da misses (-24 %: 40 voiced Praat
    frames, a quarter of them near 545 Hz, which Praat's path keeps and we do not)."""
    paths = [p for p in halves()["tuning"] if p.parent == VOICES]
    batch = load_many([str(p) for p in paths], sample_rate=RATE)
    refs = [praat_median(p) for p in paths]

    def misses(extractor: YinPitch) -> set[str]:
        medians = extractor.run(batch)["pitch_median_hz"]
        return {p.name for p, m, r in zip(paths, medians, refs) if m is None or abs(m / r - 1) > MEDIAN_REL}

    with_rule, without = misses(YinPitch()), misses(YinPitch(voicing_threshold=None))
    assert with_rule < without, (with_rule, without)
    assert "klettres_da_16k.flac" in without - with_rule


def main() -> None:
    for label, band in (("Praat defaults, 75-600 Hz (the criterion)", (75.0, 600.0)),
                        ("TRACE's band, 80-300 Hz, against to_pitch(80, 300)", (80.0, 300.0))):
        print(label)
        for half in ("tuning", "held_out"):
            rows = figures(half, *band)
            s = summary(rows)
            print(f"  {half:8s} {s['files']:3d} files  within 3 %: {s['share']:.1%}  mean |error| "
                  f"{100 * s['mean_abs']:.2f}%  worst {s['worst'][0]} {100 * s['worst'][1]:+.1f}%")
            for r in rows:
                flag = "" if abs(r["rel"]) <= MEDIAN_REL else "  MISS"
                ours = f"{r['ours']:6.1f}" if r["ours"] is not None else "  none"
                print(f"    {r['file']:38s} ours {ours}  praat {r['praat']:6.1f}  {100 * r['rel']:+6.1f}%{flag}")


if __name__ == "__main__":
    main()
