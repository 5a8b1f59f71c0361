"""Voice inventory over the local TTS engines (festival, flite, espeak-ng).

A voice is an engine voice plus pitch, rate and vocal-tract (formant) settings; variants of one
engine voice with a different F0 and formant scale act as distinct, acoustically close speakers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

#: Native output rates of the engines (flite kal16/slt/awb/rms, espeak-ng, festival per voice).
ENGINE_RATES = {"flite": 16000, "espeak": 22050}
FESTIVAL_RATES = {"cmu_us_slt_arctic_hts": 32000, "kal_diphone": 16000}

#: Paralinguistic styles a voice can be asked for: (rate factor, F0 factor).
STYLES = {"slow": (0.65, 1.0), "fast": (1.45, 1.0), "high": (1.0, 1.4), "low": (1.0, 0.72)}


@dataclass(frozen=True)
class Voice:
    """A synthetic speaker: engine, engine voice name, gender, quality tier and prosody settings."""

    id: str
    engine: str  # "flite" | "festival" | "espeak"
    model: str  # flite voice, festival voice (without "voice_"), or espeak "lang+variant"
    gender: str  # "female" | "male"
    quality: str  # "natural" (HTS / clustergen) | "robotic" (diphone / formant synthesis)
    identity: str  # the speaker behind the voice: renderings of one recorded speaker share it
    f0_hz: float | None = None  # flite: mean F0 of the output (engine default when None)
    espeak_pitch: int | None = None  # espeak-ng -p setting, 0..99 (default 50)
    rate: float = 1.0  # speaking-rate factor, > 1 is faster
    formant_scale: float = 1.0  # > 1 shortens the vocal tract (brighter timbre), by resampling

    def __post_init__(self) -> None:
        """Refuse unknown engines, festival voices, genders, quality tiers and bad factors."""
        if self.engine not in ("flite", "espeak", "festival"):
            raise ValueError(f"voice {self.id!r}: unknown TTS engine {self.engine!r}")
        if self.engine == "festival" and self.model not in FESTIVAL_RATES:
            raise ValueError(f"voice {self.id!r}: unknown festival voice {self.model!r}")
        if self.gender not in ("female", "male") or self.quality not in ("natural", "robotic"):
            raise ValueError(f"voice {self.id!r}: bad gender {self.gender!r} or quality {self.quality!r}")
        if self.rate <= 0 or self.formant_scale <= 0:
            raise ValueError(f"voice {self.id!r}: rate and formant_scale must be positive")

    @property
    def sample_rate(self) -> int:
        """Rate of the WAV files this voice produces."""
        if self.engine == "festival":
            return FESTIVAL_RATES[self.model]
        return ENGINE_RATES[self.engine]

    def styled(self, style: str) -> Voice:
        """The same speaker asked to talk slow/fast/high/low; festival voices take no style."""
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}; expected one of {sorted(STYLES)}")
        if not self.can_style:
            raise ValueError(f"voice {self.id!r} cannot change its pitch")
        rate_factor, f0_factor = STYLES[style]
        if self.engine == "espeak":
            base = 50 if self.espeak_pitch is None else self.espeak_pitch
            pitch = base if f0_factor == 1.0 else (85 if f0_factor > 1 else 12)
            return replace(self, id=f"{self.id}+{style}", rate=self.rate * rate_factor, espeak_pitch=pitch)
        return replace(
            self, id=f"{self.id}+{style}", rate=self.rate * rate_factor, f0_hz=self.f0_hz * f0_factor
        )

    @property
    def can_style(self) -> bool:
        """Whether slow/fast/high/low renderings are possible (espeak, or flite with a set F0)."""
        return self.engine == "espeak" or (self.engine == "flite" and self.f0_hz is not None)

    def spec(self) -> dict:
        """All settings as a plain dict (for render keys and corpus.json)."""
        return asdict(self)


def _espeak(variant: str, lang: str, pitch: int | None = None, rate: float = 1.0) -> Voice:
    """An espeak-ng voice: a language/accent with a female (f*) or male (m*) variant."""
    gender = "female" if variant.startswith("f") else "male"
    return Voice(f"espeak-{variant}", "espeak", f"{lang}+{variant}", gender, "robotic",
                 f"espeak-{variant}", espeak_pitch=pitch, rate=rate)


VOICES: tuple[Voice, ...] = (
    Voice("hts-slt", "festival", "cmu_us_slt_arctic_hts", "female", "natural", "slt"),
    Voice("flite-slt", "flite", "slt", "female", "natural", "slt", f0_hz=170.0),
    Voice("flite-slt-bright", "flite", "slt", "female", "natural", "slt-bright",
          f0_hz=210.0, rate=1.05, formant_scale=1.08),
    Voice("flite-slt-soft", "flite", "slt", "female", "natural", "slt-soft",
          f0_hz=188.0, rate=0.92, formant_scale=1.04),
    Voice("flite-awb", "flite", "awb", "male", "natural", "awb", f0_hz=118.0),
    Voice("flite-awb-deep", "flite", "awb", "male", "natural", "awb-deep",
          f0_hz=98.0, rate=0.95, formant_scale=0.93),
    Voice("flite-rms", "flite", "rms", "male", "natural", "rms"),
    Voice("flite-rms-bright", "flite", "rms", "male", "natural", "rms-bright",
          rate=1.05, formant_scale=1.07),
    Voice("festival-kal", "festival", "kal_diphone", "male", "robotic", "kal"),
    Voice("flite-kal", "flite", "kal16", "male", "robotic", "kal"),
    _espeak("f1", "en-us"),
    _espeak("f2", "en", rate=0.95),
    _espeak("f3", "en-us", pitch=55),
    _espeak("f4", "en-gb-scotland"),
    _espeak("f5", "en-029", rate=1.05),
    _espeak("m1", "en-us"),
    _espeak("m2", "en"),
    _espeak("m3", "en-us", rate=1.05),
    _espeak("m4", "en-gb-scotland"),
    _espeak("m5", "en-029"),
    _espeak("m6", "en-us", pitch=40),
    _espeak("m7", "en-gb-x-rp", rate=0.95),
)

VOICES_BY_ID: dict[str, Voice] = {v.id: v for v in VOICES}


def pool(*, gender: str | None = None, quality: str | None = None) -> tuple[Voice, ...]:
    """Voices of the inventory filtered by gender and/or quality tier, in inventory order."""
    return tuple(
        v for v in VOICES
        if (gender is None or v.gender == gender) and (quality is None or v.quality == quality)
    )


def opposite(gender: str) -> str:
    """The other gender of the inventory."""
    return "male" if gender == "female" else "female"


def pick(rng: np.random.Generator, voices: Sequence[Voice], *, not_identity: Iterable[str] = ()) -> Voice:
    """A seeded uniform choice among voices whose identity is not excluded."""
    excluded = set(not_identity)
    candidates = [v for v in voices if v.identity not in excluded]
    if not candidates:
        raise ValueError(f"no voice left to pick after excluding {sorted(excluded)}")
    return candidates[int(rng.integers(len(candidates)))]
