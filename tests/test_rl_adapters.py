"""RL adapters called the way their frameworks call them return the scorer's scores.

TRL: the adapter is run by TRL's own `GRPOTrainer._calculate_rewards` (the installed trl, on a
minimal trainer object holding what that method reads), sync and async. verl 0.9's reward managers
call `compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)` per
sample (verl/experimental/reward_loop/reward_manager/naive.py); verl's own reward loop runs the
HTTP form in tests/test_verl_http.py.
"""

from __future__ import annotations

import base64
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sdscore.models.episodes import Episode, Turn
from sdscore.rl import trl_reward_func, verl_compute_score
from sdscore.rl.episode_specs import EpisodeSpecError, audio_from_spec, episode_from_messages
from sdscore.rl.shared_batchers import MODEL_ENV, close_shared_batchers
from sdscore.rl.verl_samples import VerlConfigError

from rl_episodes import SR, compact_scorer, wav_bytes, wave

trl = pytest.importorskip("trl")


@pytest.fixture(scope="module")
def scorer():
    return compact_scorer()


@pytest.fixture(autouse=True)
def _fresh_batchers():
    yield
    close_shared_batchers()


@pytest.fixture(scope="module")
def samples():
    rng = np.random.default_rng(3)
    questions = [wave(rng, 0.8) for _ in range(6)]
    answers = [wave(rng, rng.uniform(0.4, 1.2)) for _ in range(6)]
    texts = [f"reply {i}" for i in range(6)]
    return questions, answers, texts


def expected(scorer, questions, answers, texts, prompt="how are you?"):
    episodes = [Episode((Turn("user", prompt, q), Turn("assistant", t, a)))
                for q, a, t in zip(questions, answers, texts)]
    return scorer.score(episodes).numpy()


def _trainer(reward_func):
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import get_callable_name

    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True), reward_funcs=[reward_func],
        reward_processing_classes=[None], reward_func_names=[get_callable_name(reward_func)],
        args=SimpleNamespace(report_to=[]), state=SimpleNamespace(global_step=0), _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None, environments=None)
    return trainer, GRPOTrainer._calculate_rewards


def _trl_inputs(questions, answers, texts, conversational: bool):
    if conversational:
        prompts = [[{"role": "user", "content": "how are you?"}] for _ in texts]
        completions = [[{"role": "assistant", "content": t}] for t in texts]
    else:
        prompts, completions = ["how are you?"] * len(texts), list(texts)
    # dataset columns as HF datasets hands them over: Audio items of the prompt, and the rollout's audio
    inputs = [{"prompt": p, "completion": c,
               "audio": {"bytes": wav_bytes(q), "path": f"q{i}.wav"},
               "completion_audio": {"array": a.astype(np.float64), "sampling_rate": SR}}
              for i, (p, c, q, a) in enumerate(zip(prompts, completions, questions, answers))]
    return inputs, prompts, completions


@pytest.mark.parametrize("conversational", [False, True])
def test_trl_sync_reward_func_in_grpo_calculate_rewards(scorer, samples, conversational):
    questions, answers, texts = samples
    func = trl_reward_func(max_wait_ms=1)
    trainer, calculate = _trainer(func)
    inputs, prompts, completions = _trl_inputs(questions, answers, texts, conversational)
    rewards = calculate(trainer, inputs, prompts, completions, [[1, 2]] * len(texts))
    # the prompt audio went through 16-bit WAV: score the reference on the same samples
    q16 = [audio_from_spec({"bytes": wav_bytes(q)}, SR, "q") for q in questions]  # (decoding: tested below)
    want = expected(scorer, q16, answers, texts)
    assert rewards.shape == (len(texts), 1)
    assert np.abs(rewards[:, 0].numpy() - want).max() <= 1e-5


def test_trl_async_reward_func_in_grpo_calculate_rewards(scorer, samples):
    from trl.trainer.utils import is_async_callable, shutdown_event_loop_in_daemon, start_event_loop_in_daemon

    questions, answers, texts = samples
    func = trl_reward_func(asynchronous=True, max_wait_ms=1)
    assert is_async_callable(func)
    trainer, calculate = _trainer(func)
    thread, loop, ready = start_event_loop_in_daemon(name="test-trl-loop")
    ready.wait()
    trainer.async_loop = loop
    try:
        inputs, prompts, completions = _trl_inputs(questions, answers, texts, conversational=True)
        rewards = calculate(trainer, inputs, prompts, completions, [[1]] * len(texts))
    finally:
        shutdown_event_loop_in_daemon(thread, loop)
    q16 = [audio_from_spec({"bytes": wav_bytes(q)}, SR, "q") for q in questions]
    assert np.abs(rewards[:, 0].numpy() - expected(scorer, q16, answers, texts)).max() <= 1e-5


def test_trl_reward_func_pickles_without_the_model_and_names_bad_samples(samples, caplog):
    questions, answers, texts = samples
    func = trl_reward_func(name="speech_reward")
    assert func.__name__ == "speech_reward"
    func(prompts=["hi"], completions=["yo"])  # loads the model in this process
    clone = pickle.loads(pickle.dumps(func))  # what TRL's async workers receive
    assert len(pickle.dumps(func)) < 2000
    out = clone(prompts=["hi", "hi"], completions=["a", "b"],
                completion_audio=[{"bytes": b"not audio at all"}, answers[0]])
    assert out[0] is None and isinstance(out[1], float)
    assert "sample 0" in caplog.text and "cannot decode" in caplog.text


def test_verl_per_sample_form(scorer, samples):
    questions, answers, texts = samples
    infos = [{"messages": [{"role": "user", "content": [{"type": "text", "text": "how are you?"},
                                                         {"type": "audio", "audio": {"array": q, "sampling_rate": SR}}]}],
              "audio": a, "audio_sample_rate": SR} for q, a in zip(questions, answers)]
    want = expected(scorer, questions, answers, texts)
    # NaiveRewardManager: compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)
    per_sample = [verl_compute_score(data_source="speech", solution_str=t, ground_truth=None, extra_info=info,
                                     max_wait_ms=1)
                  for t, info in zip(texts, infos)]
    assert all(r["sdscore_failed"] == 0 and r["sdscore_error"] == "" for r in per_sample)
    assert np.abs(np.array([r["score"] for r in per_sample]) - want).max() <= 1e-5


def test_verl_resamples_audio_at_its_own_rate(scorer, samples):
    import soxr

    questions, answers, texts = samples
    a24 = soxr.resample(answers[0], SR, 24000).astype(np.float32)
    got = verl_compute_score("speech", texts[0], None, {"prompt": "how are you?", "audio": a24,
                                                         "audio_sample_rate": 24000})
    back = audio_from_spec({"array": a24, "sampling_rate": 24000}, SR, "x")
    want = scorer.score([Episode((Turn("user", "how are you?"), Turn("assistant", texts[0], back)))]).item()
    assert got["score"] == pytest.approx(want, abs=1e-5)


def test_verl_bad_sample_takes_the_error_reward_with_its_reason(tmp_path, monkeypatch):
    info = {"index": 12, "prompt": "hi", "audio": str(tmp_path / "missing.wav")}
    got = verl_compute_score("speech", "hello", None, info)
    assert got["score"] == 0.0 and got["sdscore_failed"] == 1  # the documented default error_reward
    assert got["sdscore_error"].startswith("sample 12 (speech)") and "missing.wav" in got["sdscore_error"]
    assert verl_compute_score("speech", "hello", None, info, error_reward=-1.0)["score"] == -1.0
    bad_spec = verl_compute_score("speech", "hello", None, {"prompt": "hi", "audio": {"other": 1}}, error_reward=-2)
    assert bad_spec["score"] == -2.0 and "sample ? (speech)" in bad_spec["sdscore_error"]
    with pytest.raises(VerlConfigError, match="unknown reward_kwargs max_wait"):
        verl_compute_score("speech", "hello", None, info, max_wait=1)
    with pytest.raises(VerlConfigError, match="error_reward must be a finite number"):
        verl_compute_score("speech", "hello", None, info, error_reward="low")
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "no-model"))
    close_shared_batchers()
    with pytest.raises(Exception, match="no-model"):  # a model that cannot load is not a sample's fault
        verl_compute_score("speech", "hello", None, {"prompt": "hi"})


def test_audio_specs_decode_like_the_file_loader(tmp_path):
    from sdscore.audio import load

    rng = np.random.default_rng(0)
    x = wave(rng, 0.7)
    path = tmp_path / "x.flac"
    import soundfile as sf

    sf.write(path, x, 22050)
    data = path.read_bytes()
    by_file = load(path, SR)
    for spec in ({"bytes": data}, {"bytes": data, "path": "ignored.flac"},
                 {"base64": base64.b64encode(data).decode()}):
        np.testing.assert_array_equal(audio_from_spec(spec, SR, "s"), by_file)
    wav_path = tmp_path / "x.wav"
    wav_path.write_bytes(wav_bytes(x, 44100))
    np.testing.assert_array_equal(audio_from_spec({"bytes": wav_path.read_bytes()}, SR, "s"), load(wav_path, SR))
    assert audio_from_spec({"path": str(path)}, SR, "s") == str(path)


@pytest.mark.parametrize("spec,message", [
    ({"base64": "!!!"}, "not valid base64"),
    ({"bytes": b""}, "no audio bytes"),
    ({"bytes": b"RIFF1234WAVEfmt "}, "truncated header"),
    ({"array": np.zeros(100, np.float32)}, "needs its 'sampling_rate'"),
    ({"array": np.zeros(100, np.int16), "sampling_rate": 16000}, "float samples"),
    ({"array": np.full(100, np.nan, np.float32), "sampling_rate": 16000}, "NaN"),
    ({"other": 1}, "none of path, bytes, base64 or array"),
    (42, "expected a path"),
])
def test_bad_audio_specs_name_the_place(spec, message):
    with pytest.raises(EpisodeSpecError, match=message) as info:
        episode_from_messages([{"role": "user", "content": "hi", "audio": spec}], SR, "sample 7")
    assert "sample 7" in str(info.value)


def test_audio_spec_size_cap_and_paths_refused_when_asked():
    with pytest.raises(EpisodeSpecError, match="exceed the limit of 10 bytes"):
        audio_from_spec({"bytes": b"x" * 11}, SR, "a", max_bytes=10)
    with pytest.raises(EpisodeSpecError, match="paths are not accepted"):
        audio_from_spec("/etc/passwd", SR, "a", allow_paths=False)
