"""Read a response blueprint's values by name, whether it is laid out as TRACE's Fig. 7 JSON
(agent_response, agent_audio_quality{...}, agent_audio_properties{...}) or as flat extractor
columns (transcript, dnsmos_ovrl, pitch_std_hz, ...), and render it in the Fig. 7 layout, with
feature groups left out for TRACE's feature ablation (App. H, Tab. 12).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_QUALITY = "agent_audio_quality"
_PROPERTIES = "agent_audio_properties"

#: logical name → (Fig. 7 path, flat extractor column names tried in order)
NUMERIC_FIELDS: dict[str, tuple[tuple[str, str], tuple[str, ...]]] = {
    "dnsmos_sig": ((_QUALITY, "DNSMOS_Personalized_Signal_Quality"), ("dnsmos_personalized_sig", "dnsmos_sig")),
    "dnsmos_bak": ((_QUALITY, "DNSMOS_Personalized_Background_Quality"), ("dnsmos_personalized_bak", "dnsmos_bak")),
    "dnsmos_ovrl": ((_QUALITY, "DNSMOS_Personalized_Overall_Quality"), ("dnsmos_personalized_ovrl", "dnsmos_ovrl")),
    "p808_mos": ((_QUALITY, "P808_Overall_Quality"), ("p808_mos",)),
    "pitch_mean_hz": ((_PROPERTIES, "Mean_Pitch_Hz"), ("pitch_mean_hz",)),
    "pitch_std_hz": ((_PROPERTIES, "Std_Dev_Pitch_Hz"), ("pitch_std_hz",)),
    "loudness_lufs": ((_PROPERTIES, "Integrated_Loudness_LUFS"), ("loudness_lufs",)),
    "loudness_std_lu": ((_PROPERTIES, "Std_Dev_Loudness_LUFS"), ("loudness_std_lu",)),
    "speech_rate_wpm": ((_PROPERTIES, "Speech_Rate_WPM"), ("speech_rate_wpm",)),
    "articulation_rate_wpm": ((_PROPERTIES, "Articulation_Rate_WPM"), ("articulation_rate_wpm",)),
}
#: TRACE's feature groups (App. H, Tab. 12: "w/o emotion classifier", "w/o accent classifier",
#: "w/o audio quality", "w/o audio properties") → the Fig. 7 key each one is shown under. The
#: transcript (agent_response) is not a feature group: no judge runs without it.
FEATURE_GROUPS: dict[str, str] = {
    "emotion": "agent_emotion",  # emotion classifier class probabilities
    "accent": "agent_accent",  # accent classifier similarity scores
    "quality": _QUALITY,  # DNSMOS SIG/BAK/OVRL and P.808
    "properties": _PROPERTIES,  # pitch and loudness (mean, std, contour), speech and articulation rate
}
_CONTOURS = {
    "Full_Pitch_Contour_Hz": "pitch_contour_hz",
    "Full_Loudness_Contour_LUFS": "loudness_contour_lufs",
}
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _as_float(value: Any) -> float | None:
    """A finite float from a number or from text such as "4.31 / 5.00"; None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        match = _NUMBER.search(value)
        value = match.group(0) if match else None
        if value is None:
            return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def number(blueprint: Mapping[str, Any], name: str) -> float | None:
    """The value of a NUMERIC_FIELDS entry, or None when the blueprint lacks it or it is not finite."""
    (group, key), flat_names = NUMERIC_FIELDS[name]
    nested = blueprint.get(group)
    if isinstance(nested, Mapping) and key in nested:
        return _as_float(nested[key])
    for flat in flat_names:
        if flat in blueprint:
            return _as_float(blueprint[flat])
    return None


def transcript_of(blueprint: Mapping[str, Any]) -> str:
    """The response's transcript ("" when absent)."""
    text = blueprint.get("agent_response", blueprint.get("transcript"))
    return text.strip() if isinstance(text, str) else ""


def scores_of(blueprint: Mapping[str, Any], kind: str) -> dict[str, float] | None:
    """Class scores for kind "emotion" or "accent" as {label: score}; None when no classifier ran."""
    raw = blueprint.get(f"agent_{kind}", blueprint.get(kind))
    if not isinstance(raw, Mapping) or not raw:
        return None
    scores = {str(label): _as_float(score) for label, score in raw.items()}
    if any(score is None for score in scores.values()):
        return None
    return scores  # type: ignore[return-value]


def _contour(blueprint: Mapping[str, Any], trace_key: str) -> list[float] | None:
    properties = blueprint.get(_PROPERTIES)
    raw = properties.get(trace_key) if isinstance(properties, Mapping) else blueprint.get(_CONTOURS[trace_key])
    if not isinstance(raw, (list, tuple)):
        return None
    values = [_as_float(v) for v in raw]
    return [round(v, 2) if v is not None else None for v in values]  # type: ignore[misc]


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def check_groups(groups: str | Sequence[str] | None) -> tuple[str, ...]:
    """Feature-group names (a sequence, or one comma-separated string) checked against FEATURE_GROUPS,
    in FEATURE_GROUPS' order without repeats; () for None or "" (nothing left out)."""
    if groups is None:
        return ()
    names = [g.strip() for g in groups.split(",")] if isinstance(groups, str) else [str(g).strip() for g in groups]
    names = [g for g in names if g]
    unknown = sorted({g for g in names if g not in FEATURE_GROUPS})
    if unknown:
        raise ValueError(f"unknown blueprint feature group(s) {unknown}; expected some of {list(FEATURE_GROUPS)}")
    return tuple(g for g in FEATURE_GROUPS if g in names)


def trace_view(blueprint: Mapping[str, Any], drop: Sequence[str] = ()) -> dict[str, Any]:
    """The blueprint as TRACE's Fig. 7 object (what the blueprint prompt shows); missing values are null.
    drop: FEATURE_GROUPS names whose keys are left out of the object (the feature ablation)."""
    dropped = {FEATURE_GROUPS[g] for g in check_groups(drop)}

    def value(name: str) -> float | None:
        return _rounded(number(blueprint, name))

    properties = {
        "Mean_Pitch_Hz": value("pitch_mean_hz"),
        "Std_Dev_Pitch_Hz": value("pitch_std_hz"),
        "Full_Pitch_Contour_Hz": _contour(blueprint, "Full_Pitch_Contour_Hz"),
        "Integrated_Loudness_LUFS": value("loudness_lufs"),
        "Std_Dev_Loudness_LUFS": value("loudness_std_lu"),
        "Full_Loudness_Contour_LUFS": _contour(blueprint, "Full_Loudness_Contour_LUFS"),
        "Speech_Rate_WPM": value("speech_rate_wpm"),
        "Articulation_Rate_WPM": value("articulation_rate_wpm"),
    }
    quality = {NUMERIC_FIELDS[k][0][1]: value(k) for k in ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "p808_mos")}
    emotion, accent = scores_of(blueprint, "emotion"), scores_of(blueprint, "accent")
    view = {
        "agent_response": transcript_of(blueprint),
        "agent_emotion": None if emotion is None else {k: round(v, 3) for k, v in emotion.items()},
        "agent_accent": None if accent is None else {k: round(v, 3) for k, v in accent.items()},
        _QUALITY: quality,
        _PROPERTIES: properties,
    }
    return {key: value for key, value in view.items() if key not in dropped}
