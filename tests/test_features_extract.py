"""sdscore.features.extract: registry, dependency order, one row per item, error isolation."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import polars as pl
import pytest
from features_audio import batch_of, harmonic
from sdscore.features import REGISTRY, extract, make_extractor
from sdscore.features.extract import resample, resolve, select


class Doubler:
    """A toy extractor: the item's length; raises on items of exactly 7 samples."""

    name = "double"
    requires: tuple[str, ...] = ()
    schema: ClassVar[dict[str, pl.DataType]] = {"n2": pl.Int64}

    def run(self, batch, inputs):
        if any(len(x) == 7 for x in batch):
            raise RuntimeError("seven samples are bad luck")
        return {"n2": [2 * len(x) for x in batch]}


class FakeAsr:
    """Stands in for the asr extractor: one word per 0.5 s, half the time speaking."""

    name = "asr"
    requires: tuple[str, ...] = ()
    schema: ClassVar[dict[str, pl.DataType]] = {
        "transcript": pl.Utf8,
        "words": pl.List(
            pl.Struct({"word": pl.Utf8, "start": pl.Float64, "end": pl.Float64})
        ),
    }

    def run(self, batch, inputs):
        words = [
            [
                {"word": "w", "start": 0.5 * k, "end": 0.5 * k + 0.25}
                for k in range(int(d / 0.5))
            ]
            for d in batch.durations
        ]
        return {
            "transcript": [" ".join(w["word"] for w in ws) for ws in words],
            "words": words,
        }


def test_registry_names_every_extractor():
    assert set(REGISTRY) == {
        "vad",
        "quality",
        "pitch",
        "pitch_aubio",
        "loudness",
        "asr",
        "rate",
        "emotion",
        "accent",
        "praat_pitch",
        "language",
    }


def test_rows_follow_items_and_failed_audio_gets_nulls_and_its_error():
    batch = batch_of(
        [harmonic(150, 1.0), np.zeros(0), harmonic(200, 0.7)],
        errors=[None, "x.wav: no audio samples", None],
    )
    frame = extract(["loudness", "pitch"], batch)
    assert frame.height == 3
    assert frame["error"].to_list() == [None, "x.wav: no audio samples", None]
    assert frame["loudness_lufs"][1] is None and frame["pitch_mean_hz"][1] is None
    assert frame["pitch_median_hz"][0] == pytest.approx(150, rel=0.01)
    assert frame["pitch_median_hz"][2] == pytest.approx(200, rel=0.01)
    assert frame.schema["pitch_contour_hz"] == pl.List(pl.Float64)


def test_an_empty_batch_gives_an_empty_frame():
    frame = extract(["vad", "quality", "pitch", "loudness"], batch_of([]))
    assert (
        frame.height == 0 and "p808_mos" in frame.columns and "error" in frame.columns
    )


def test_an_extractor_that_raises_is_retried_item_by_item():
    batch = batch_of([np.ones(5), np.ones(7), np.ones(9)])
    frame = extract([Doubler()], batch)
    assert frame["n2"].to_list() == [10, None, 18]
    assert frame["error"].to_list() == [
        None,
        "double: seven samples are bad luck",
        None,
    ]


def test_a_single_failing_item_records_the_error():
    frame = extract([Doubler()], batch_of([np.ones(7)]))
    assert frame["error"].to_list() == ["double: seven samples are bad luck"]


def test_wrong_column_length_becomes_each_items_error():
    class Short(Doubler):
        def run(self, batch, inputs):
            return {"n2": []}

    frame = extract([Short()], batch_of([np.ones(3), np.ones(4)]))
    assert frame["n2"].to_list() == [None, None]
    assert (
        frame["error"].to_list()
        == ["double: extractor 'double' column 'n2': expected 1 values, 0 values"] * 2
    )


def test_rate_pulls_in_its_asr_dependency_first():
    chain = resolve(["rate", FakeAsr()])
    assert [e.name for e in chain] == ["asr", "rate"]
    frame = extract(["rate", FakeAsr()], batch_of([np.zeros(32000, np.float32)]))
    assert frame["speech_rate_wpm"][0] == pytest.approx(4 / 2.0 * 60)
    assert frame["articulation_rate_wpm"][0] == pytest.approx(4 / 1.0 * 60)
    assert "transcript" in frame.columns


def test_options_are_passed_per_extractor():
    frame = extract(["pitch"], batch_of([harmonic(60, 1.0)]), pitch={"fmin": 50.0})
    assert frame["pitch_median_hz"][0] == pytest.approx(60, rel=0.01)
    assert (
        extract(["pitch"], batch_of([harmonic(60, 1.0)]))["pitch_median_hz"][0] is None
    )


def test_unknown_extractor_is_refused():
    with pytest.raises(
        ValueError, match="unknown extractor 'mfcc'; known: accent, asr"
    ):
        make_extractor("mfcc")


def test_no_extractors_is_refused():
    with pytest.raises(ValueError, match="no extractors requested"):
        extract([], batch_of([np.ones(3)]))


def test_options_for_an_extractor_not_requested_are_refused():
    with pytest.raises(
        ValueError, match="options given for extractors not requested: vad"
    ):
        extract(["loudness"], batch_of([np.ones(3)]), vad={"threshold": 0.4})


def test_options_must_be_a_dict():
    with pytest.raises(
        TypeError, match="options for 'pitch' must be a dict, got float"
    ):
        extract(["pitch"], batch_of([np.ones(3)]), pitch=0.8)


def test_options_for_a_built_extractor_are_refused():
    with pytest.raises(
        ValueError,
        match="options given for 'double', which was passed as a built extractor",
    ):
        extract([Doubler()], batch_of([np.ones(3)]), double={"x": 1})


def test_dependency_cycles_are_refused():
    class A(Doubler):
        name, requires = "a", ("b",)

    class B(Doubler):
        name, requires = "b", ("a",)

    with pytest.raises(ValueError, match="extractor dependency cycle: a -> b -> a"):
        resolve([A(), B()])


def test_select_and_resample_keep_items_and_errors():
    batch = batch_of(
        [np.ones(160), np.zeros(0), np.ones(320)], errors=[None, "bad", None]
    )
    picked = select(batch, [2, 1])
    assert picked.lengths.tolist() == [320, 0] and picked.errors == [None, "bad"]
    up = resample(batch, 24000)
    assert (
        up.sample_rate == 24000
        and up.lengths.tolist() == [240, 0, 480]
        and up.errors == batch.errors
    )
    assert resample(batch, 16000) is batch
