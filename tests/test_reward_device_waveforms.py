"""In-memory waveforms in RL loops: any DLPack array in, rewards out on the scorer's device, and
the same checks as the CLI applies to files (issue 28: empty, non-finite, over --max-audio-seconds,
clips cut to the model's window).

Two models: the shipped compact model (its front end runs on the host: the scorer hands it numpy
views) and a tiny random-weight SDiaReward Qwen2.5-Omni model (its log-mel runs on the model's
device: the scorer hands it the tensors themselves). No GPU here: "the device" is the CPU, where
sharing memory is observable through data pointers.
"""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest
import torch
from sdscore import _core
from sdscore.audio import dlpack_waveforms
from sdscore.errors import SdscoreError
from sdscore.models.episodes import Episode, Turn
from sdscore.rl.batcher import RewardBatcher
from sdscore.rl.episode_specs import EpisodeSpecError, audio_from_spec
from sdscore.runtime.reward.episode_scorer import ClipCutWarning, RewardScorer

from rl_episodes import SR, compact_scorer, wave


class DLPackOnly:
    """An array that offers nothing but the DLPack protocol (as a cupy or jax array would)."""

    def __init__(self, tensor: torch.Tensor):
        self._tensor = tensor

    def __dlpack__(self, *args, **kwargs):
        return self._tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


@pytest.fixture(scope="module")
def compact():
    return compact_scorer()


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    pytest.importorskip("transformers")
    from sdscore.models.loading import load_reward_model

    from tiny_reward_models import build_tiny_sdiareward

    root = tmp_path_factory.mktemp("device-waves")
    ckpt, base = build_tiny_sdiareward(root / "ckpt", root / "base", pooling="mean", seed=0)
    return RewardScorer(load_reward_model(ckpt, base=base), device="cpu", prefetch=False)


@pytest.fixture(scope="module")
def clips():
    rng = np.random.default_rng(11)
    return [wave(rng, s) for s in (0.7, 1.1, 0.5, 0.9)]


def _episode(question, answer, text="fine thanks", id=""):
    return Episode((Turn("user", "how are you?", question), Turn("assistant", text, answer)), id=id)


def _strided(x: np.ndarray) -> torch.Tensor:
    """x as a non-contiguous view (every other element of a buffer twice as long)."""
    buffer = torch.zeros(2 * len(x))
    buffer[::2] = torch.from_numpy(x)
    view = buffer[::2]
    assert not view.is_contiguous()
    return view


FORMS = {
    "numpy": lambda x: x,
    "numpy-float64": lambda x: x.astype(np.float64),
    "torch": lambda x: torch.from_numpy(x.copy()),
    "torch-strided": _strided,
    "dlpack-only": lambda x: DLPackOnly(torch.from_numpy(x.copy())),
    "dlpack-only-strided": lambda x: DLPackOnly(_strided(x)),
}


@pytest.mark.parametrize("which", ["compact", "qwen"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_array_form_scores_as_numpy(request, which, form, clips):
    scorer = request.getfixturevalue(which)
    convert = FORMS[form]
    reference = [_episode(clips[k], clips[k + 1]) for k in (0, 2)]
    given = [_episode(convert(clips[k]), convert(clips[k + 1])) for k in (0, 2)]
    torch.testing.assert_close(scorer.score(given), scorer.score(reference), atol=1e-6, rtol=0)


@pytest.mark.parametrize("which", ["compact", "qwen"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_tensors_score_as_their_float32_values(request, which, dtype, clips):
    scorer = request.getfixturevalue(which)
    halves = [torch.from_numpy(c).to(dtype) for c in clips[:2]]
    got = scorer.score([_episode(*halves)])
    want = scorer.score([_episode(*(h.float().numpy() for h in halves))])
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("which", ["compact", "qwen"])
def test_integer_pcm_is_refused_in_every_form(request, which, clips):
    scorer = request.getfixturevalue(which)
    pcm = torch.full((1600,), 1000, dtype=torch.int16)
    episodes = [_episode(clips[0], pcm, id="t"), _episode(clips[0], DLPackOnly(pcm)),
                _episode(clips[0], pcm.numpy())]
    with pytest.raises(SdscoreError, match=r"(?s)3 of 3 episodes.*t: turn 1 \(episode 0\): waveform is torch.int16; "
                                           r"pass float samples.*episode 1: turn 1: waveform is torch.int16.*"
                                           r"episode 2: turn 1: waveform is int16"):
        scorer.score(episodes)


def _spy(monkeypatch, scorer) -> list:
    seen = []
    original = scorer.model.prepare_many

    def prepare_many(episodes, audio, inference=False):
        seen.extend(w for waves in audio for w in waves if w is not None)
        return original(episodes, audio, inference=inference)

    monkeypatch.setattr(scorer.model, "prepare_many", prepare_many)
    return seen


@pytest.mark.parametrize("wrap", [lambda t: t, DLPackOnly], ids=["torch", "dlpack-only"])
def test_a_tensor_on_the_device_reaches_a_device_front_end_uncopied(qwen, clips, monkeypatch, wrap):
    tensors = [torch.from_numpy(c.copy()) for c in clips[:2]]
    seen = _spy(monkeypatch, qwen)
    qwen.score([_episode(*(wrap(t) for t in tensors))])
    assert [type(w) for w in seen] == [torch.Tensor, torch.Tensor]
    assert [w.data_ptr() for w in seen] == [t.data_ptr() for t in tensors]


@pytest.mark.parametrize("wrap", [lambda t: t, DLPackOnly], ids=["torch", "dlpack-only"])
def test_a_cpu_tensor_reaches_a_host_front_end_as_a_view(compact, clips, monkeypatch, wrap):
    tensors = [torch.from_numpy(c.copy()) for c in clips[:2]]
    seen = _spy(monkeypatch, compact)
    compact.score([_episode(*(wrap(t) for t in tensors))])
    assert [type(w) for w in seen] == [np.ndarray, np.ndarray]
    assert [w.__array_interface__["data"][0] for w in seen] == [t.data_ptr() for t in tensors]


@pytest.mark.parametrize("which", ["compact", "qwen"])
def test_rewards_come_back_on_the_scorers_device(request, which, clips):
    scorer = request.getfixturevalue(which)
    episode = _episode(torch.from_numpy(clips[0]), DLPackOnly(torch.from_numpy(clips[1])))
    rewards = scorer.score([episode, episode])
    assert isinstance(rewards, torch.Tensor) and rewards.device == scorer.device and rewards.dtype == torch.float32
    chosen, rejected = scorer.score_pairs([(episode, episode)])
    assert chosen.device == rejected.device == scorer.device


def _at(rate: int, x: np.ndarray) -> np.ndarray:
    return _core.resample(x, SR, rate)


@pytest.fixture(params=["core-on-cpu", "torch-resampler"])
def resampler(request, monkeypatch):
    """Which resampler tensors on the CPU take: the core (the default there), or the torch one
    every other device runs (forced here, as on a GPU)."""
    if request.param == "torch-resampler":
        monkeypatch.setattr(dlpack_waveforms, "HOST_RESAMPLER_DEVICES", ())
    return request.param


@pytest.mark.parametrize("which", ["compact", "qwen"])
def test_mixed_sample_rates_resample_on_the_device_and_batch_as_one_by_one(request, which, clips, resampler):
    scorer = request.getfixturevalue(which)
    episodes, references = [], []
    for k, (rate, form) in enumerate([(24000, "torch"), (8000, "numpy"), (44100, "dlpack-only"),
                                      (16000, "torch-strided"), (22050, "numpy")]):
        question, answer = clips[k % 4], clips[(k + 1) % 4]
        at_rate = _at(rate, answer)
        episodes.append(Episode((Turn("user", "hi", question),
                                 Turn("assistant", f"reply {k}", FORMS[form](at_rate), sample_rate=rate))))
        # the reference: the core's resampler on the host (the CPU path numpy inputs take)
        references.append(Episode((Turn("user", "hi", question),
                                   Turn("assistant", f"reply {k}", _core.resample(at_rate, rate, SR)))))
    batched = scorer.score(episodes)
    one_by_one = torch.cat([scorer.score([e]) for e in episodes])
    torch.testing.assert_close(batched, one_by_one, atol=1e-5, rtol=0)
    torch.testing.assert_close(batched, scorer.score(references), atol=1e-4, rtol=0)


def test_turn_sample_rate_is_checked():
    with pytest.raises(ValueError, match=r"turn sample_rate must be an integer number of Hz in 1..1000000, got 0"):
        Turn("user", None, np.zeros(10, np.float32), sample_rate=0)
    with pytest.raises(ValueError, match="turn sample_rate is for an in-memory waveform"):
        Turn("user", None, "a.wav", sample_rate=24000)


# ---- issue 28: the in-process API checks waveforms as the CLI checks files ---------------------


@pytest.mark.parametrize("empty", [np.zeros(0, np.float32), torch.zeros(0), DLPackOnly(torch.zeros(0))],
                         ids=["numpy", "torch", "dlpack-only"])
def test_an_empty_waveform_is_refused_naming_episode_and_turn(compact, clips, empty):
    episodes = [_episode(clips[0], clips[1]), _episode(clips[0], empty)]
    with pytest.raises(SdscoreError, match=r"1 of 2 episodes could not be scored:\n  episode 1: turn 1: "
                                           r"empty waveform \(no samples\)"):
        compact.score(episodes)
    rewards = compact.score(episodes, on_error="nan")
    assert math.isfinite(rewards[0]) and math.isnan(rewards[1])
    with pytest.raises(SdscoreError, match=r"rollout-7: turn 0 \(episode 0\): empty waveform"):
        compact.score([Episode((Turn("user", None, empty),), id="rollout-7")])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_tensor_samples_are_refused(compact, clips, bad):
    answer = torch.from_numpy(clips[1].copy())
    answer[100] = bad
    with pytest.raises(SdscoreError, match=r"episode 0: turn 1: waveform has NaN or infinite samples"):
        compact.score([_episode(clips[0], answer)])


@pytest.mark.parametrize("form", ["numpy", "torch", "dlpack-only"])
def test_a_waveform_over_max_audio_seconds_is_refused_as_the_cli_refuses_a_file(clips, form):
    scorer = compact_scorer(max_audio_seconds=2)
    long = FORMS[form](np.tile(clips[0], 5)[: 3 * SR])
    with pytest.raises(SdscoreError, match=r"episode 0: turn 1: waveform of 3 s exceeds the configured cap of 2 s "
                                           r"\(max_audio_seconds; the CLI's --max-audio-seconds\)"):
        scorer.score([_episode(clips[0], long)])
    # measured at the waveform's own rate: 3 s at 24 kHz is 3 s
    at_24k = Episode((Turn("assistant", "a", FORMS[form](_at(24000, np.tile(clips[0], 5)[: 3 * SR])),
                           sample_rate=24000),))
    with pytest.raises(SdscoreError, match="waveform of 3 s exceeds the configured cap of 2 s"):
        scorer.score([at_24k])


def test_the_default_cap_is_the_clis(compact):
    from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS

    assert compact.max_audio_seconds == DEFAULT_MAX_AUDIO_SECONDS


def test_a_clip_over_the_model_window_is_scored_with_a_warning(compact, clips):
    cap = compact.model.max_clip_seconds
    long = np.tile(clips[1], 60)[: int((cap + 1) * SR)]
    episodes = [_episode(clips[0], clips[1]), _episode(clips[0], torch.from_numpy(long), id="long-one")]
    with pytest.warns(ClipCutWarning, match=rf"1 of 2 episodes have clips longer than the model's window "
                                            rf"\(RewardModel.max_clip_seconds\).*long-one: turn 1 \({cap + 1:.1f} s\) "
                                            rf"cut to the model's first {cap:g} s"):
        rewards = compact.score(episodes)
    # scored on its start: the same reward as the clip cut by hand, as `sdscore score` does
    cut = compact.score([_episode(clips[0], long[: int(cap * SR)])])
    torch.testing.assert_close(rewards[1:], cut, atol=1e-6, rtol=0)
    with pytest.warns(ClipCutWarning, match="long-one/rejected|long-one"):
        compact.score_pairs([(episodes[0], episodes[1])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compact.score(episodes[:1])  # nothing cut: no warning


def test_the_batcher_logs_a_clip_cut_to_the_window(compact, clips, caplog):
    cap = compact.model.max_clip_seconds
    long = np.tile(clips[1], 60)[: int((cap + 1) * SR)]
    with caplog.at_level(logging.WARNING, logger="sdscore.rl.batcher"), RewardBatcher(compact, max_wait_ms=1) as b:
        score = b.score(_episode(clips[0], long, id="rollout-3"))
    assert math.isfinite(score)
    assert f"rollout-3: turn 1 ({cap + 1:.1f} s) cut to the model's first {cap:g} s" in caplog.text


# ---- RL adapters' audio specs ----------------------------------------------------------------


@pytest.mark.parametrize("wrap", [lambda t: t, DLPackOnly], ids=["torch", "dlpack-only"])
def test_an_array_spec_of_a_tensor_is_resampled_on_its_device(clips, wrap, resampler):
    at_24k = _at(24000, clips[0])
    got = audio_from_spec({"array": wrap(torch.from_numpy(at_24k)), "sampling_rate": 24000}, SR, "x")
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
    want = audio_from_spec({"array": at_24k, "sampling_rate": 24000}, SR, "x")  # the core, on the host
    assert isinstance(want, np.ndarray)
    assert np.abs(got.numpy() - want).max() <= 5e-6
    stereo = torch.stack([torch.from_numpy(at_24k), torch.zeros(len(at_24k))])
    torch.testing.assert_close(audio_from_spec({"array": wrap(stereo), "sampling_rate": 24000}, SR, "x"),
                               audio_from_spec({"array": stereo.mean(0), "sampling_rate": 24000}, SR, "x"))
    plain = torch.from_numpy(clips[0])
    assert audio_from_spec(plain, SR, "x") is plain
    only = DLPackOnly(plain)
    assert audio_from_spec(only, SR, "x") is only


@pytest.mark.parametrize(("array", "message"), [
    (torch.zeros(0), r"episodes\[0\].audio: empty waveform"),
    (torch.full((10,), 3, dtype=torch.int16), r"episodes\[0\].audio: waveform is torch.int16"),
    (torch.full((10,), float("nan")), r"episodes\[0\].audio: waveform has NaN"),
])
def test_bad_tensor_array_specs_name_the_place(array, message):
    with pytest.raises(EpisodeSpecError, match=message):
        audio_from_spec({"array": array, "sampling_rate": 24000}, SR, "episodes[0].audio")


def test_verl_takes_a_tensor_at_its_own_rate(compact, clips):
    from sdscore.rl import verl_compute_score
    from sdscore.rl.shared_batchers import close_shared_batchers

    at_24k = _at(24000, clips[1])
    try:
        from_tensor = verl_compute_score("speech", "fine", None, {"prompt": "how are you?",
                                                                 "audio": torch.from_numpy(at_24k),
                                                                 "audio_sample_rate": 24000})
        from_numpy = verl_compute_score("speech", "fine", None, {"prompt": "how are you?", "audio": at_24k,
                                                                "audio_sample_rate": 24000})
    finally:
        close_shared_batchers()
    assert from_tensor["sdscore_failed"] == from_numpy["sdscore_failed"] == 0
    assert from_tensor["score"] == pytest.approx(from_numpy["score"], abs=1e-5)
