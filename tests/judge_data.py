"""Hand-written blueprints and manifests shared by the judge tests."""

from __future__ import annotations

import polars as pl

from sdscore.corpus import JUDGE_ITEMS
from sdscore.metrics.fusion import fuse

LABELS = ("content", "voice_quality", "paralinguistics", "overall")


def blueprint(transcript="", ovrl=3.4, p808=3.8, pitch=150.0, pitch_std=30.0, lufs=-23.0, rate=150.0, emotion=None):
    """A flat blueprint as the feature extractors name their columns."""
    return {
        "transcript": transcript,
        "dnsmos_sig": 3.6,
        "dnsmos_bak": 4.0,
        "dnsmos_ovrl": ovrl,
        "p808_mos": p808,
        "pitch_mean_hz": pitch,
        "pitch_std_hz": pitch_std,
        "pitch_contour_hz": [pitch] * 20,
        "loudness_lufs": lufs,
        "loudness_std_lu": 3.0,
        "loudness_contour_lufs": [lufs] * 20,
        "speech_rate_wpm": rate,
        "articulation_rate_wpm": rate * 1.2,
        "emotion": emotion,
        "accent": None,
        "words": [],
        "vad_segments": [[0.0, 1.0]],
        "duration_s": 2.0,
    }


CAPITAL = "Slowly and calmly, tell me what the capital of Australia is."
COUNT = "In a high, cheerful voice, count from one to five."
BLUEPRINTS = {
    "a1.wav": blueprint("The capital of Australia is Canberra.", pitch=120, pitch_std=25, rate=120),
    "a2.wav": blueprint("Good night, sleep well.", ovrl=2.1, p808=2.5, rate=190),
    "b1.wav": blueprint("One, two, three, four, five!", ovrl=3.2, pitch=230, emotion={"happy": 0.8, "neutral": 0.2}),
    "b2.wav": blueprint("One, two, three, four, five!", ovrl=3.3, pitch=120, emotion={"happy": 0.05, "neutral": 0.95}),
    "c1.wav": blueprint("", ovrl=2.0, p808=2.4, pitch_std=5.0),
    "c2.wav": blueprint("", ovrl=2.2, p808=2.2, pitch_std=30.0),
    "e1.wav": {"transcript": "hello there", "pitch_std_hz": 20.0},
    "e2.wav": {"transcript": "hi", "pitch_std_hz": 20.0},
}


def manifest(rows: list[tuple], with_labels: bool = True) -> pl.DataFrame:
    """JUDGE_ITEMS rows from (item_id, instruction_text, audio1, audio2[, C, VQ, P])."""
    records = []
    for row in rows:
        item_id, text, a1, a2, *labels = row
        record = dict.fromkeys(JUDGE_ITEMS)
        record.update(item_id=item_id, dataset="test", instruction_text=text, audio1_path=a1, audio2_path=a2)
        if labels:
            c, vq, p = labels
            record.update(content=c, voice_quality=vq, paralinguistics=p, overall=fuse(c, vq, p))
        records.append(record)
    frame = pl.DataFrame(records, schema=JUDGE_ITEMS)
    return frame if with_labels else frame.drop(list(LABELS))


RULE_ROWS = [
    ("A", CAPITAL, "a1.wav", "a2.wav", "1", "1", "1"),
    ("B", COUNT, "b1.wav", "b2.wav", "both_good", "both_good", "1"),
    ("C", "Tell me a fact.", "c1.wav", "c2.wav", "both_bad", "both_bad", "2"),
    ("D", CAPITAL, "a1.wav", "missing.wav", "1", "1", "1"),
    ("E", None, "e1.wav", "e2.wav", "both_good", "both_good", "both_good"),
]
