"""sdscore.rl.verl_http against a real `sdscore serve` (the CLI, in a subprocess, on the shipped
compact model), called the way verl 0.9 calls a custom reward function.

- With verl installed (``pip install --no-deps -r tests/requirements-verl.txt``: verl 0.9.1 and
  the few modules its reward loop imports, not its training stack), verl's own code runs the
  reward: `RewardLoopWorker` (verl/experimental/reward_loop/reward_loop.py) loads our function with
  `load_reward_manager` / `get_custom_reward_fn` (verl/trainer/ppo/reward.py: the
  ``pkg://`` path, reward_kwargs merged into each call), its "naive" and "dapo" managers
  (verl/experimental/reward_loop/reward_manager/naive.py, dapo.py) call it per sample, and
  `RewardLoopManager.compute_rm_score` pads, chunks over two workers and assembles
  ``rm_scores`` and ``reward_extra_info`` (Ray's `ray.get` replaced by calling the worker here).
  The in-process adapter (sdscore.rl.verl_adapter) runs through the same code.
- Without verl the same call is reproduced from those files (verl 0.9.1): the keyword call with
  reward_kwargs merged in, ``reward_extra_info`` from the result dict, columns named by the
  first sample.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch
from sdscore.errors import SdscoreError
from sdscore.rl import serve_client
from sdscore.rl.serve_client import RewardServerError
from sdscore.rl.verl_adapter import episode_from_verl
from sdscore.rl.verl_http import client_config, compute_score, compute_score_sync
from sdscore.rl.verl_samples import EXTRA_INFO_KEYS, VerlConfigError

from rl_episodes import SR, compact_scorer, wav_bytes, wave
from serve_process import free_port, serve_process

pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

TOKEN_ENV = "SDSCORE_TEST_VERL_TOKEN"
ERROR_REWARD = -4.5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`sdscore serve` on a free port, with a token and one folder where paths are allowed."""
    folder = tmp_path_factory.mktemp("allowed")
    with serve_process(["--allow-paths", str(folder), "--token-env", TOKEN_ENV],
                       env={TOKEN_ENV: "verl-test-token"}) as url:
        os.environ[TOKEN_ENV] = "verl-test-token"
        try:
            yield SimpleNamespace(url=url, folder=folder)
        finally:
            os.environ.pop(TOKEN_ENV, None)
            serve_client.close_clients()


@pytest.fixture(scope="module")
def scorer():
    return compact_scorer()


def _kwargs(server, **more):
    return {"url": server.url, "token_env": TOKEN_ENV, "error_reward": ERROR_REWARD, **more}


@pytest.fixture(scope="module")
def samples(server):
    """Five verl samples (solution_str, extra_info) with audio in every form verl users pass it;
    sample 3's response audio is a file that does not exist."""
    rng = np.random.default_rng(31)
    q0, q2 = wave(rng, 0.7), wave(rng, 0.9)
    (server.folder / "q0.wav").write_bytes(wav_bytes(q0))
    a0 = (0.3 * rng.standard_normal(int(0.8 * 24000))).astype(np.float32)  # generated speech at 24 kHz
    a1 = wave(rng, 0.6).astype(np.float64)
    a2 = torch.from_numpy((0.2 * rng.standard_normal(int(0.5 * 22050))).astype(np.float32))
    user = [{"type": "text", "text": "how are you?"}]
    return [
        ("fine, thanks", {"index": 0, "messages": [{"role": "user", "content": user + [
            {"type": "audio", "audio": {"path": str(server.folder / "q0.wav")}}]}],
            "audio": a0, "audio_sample_rate": 24000}),
        ("it is sunny", {"index": 1, "prompt": "what is the weather like?", "audio": a1, "audio_sample_rate": SR}),
        ("a table for two", {"index": 2, "messages": [{"role": "user", "content": user + [
            {"type": "audio", "audio": {"bytes": wav_bytes(q2), "path": "q2.wav"}}]}],
            "audio": {"array": a2, "sampling_rate": 22050}}),
        ("lost audio", {"index": 3, "prompt": "say something", "audio": str(server.folder / "missing.wav")}),
        ("text only", {"index": 4, "prompt": [{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": "hello"}]}),
    ]


def _one_by_one(scorer, samples) -> list[float | None]:
    """In-process scores, one sample at a time (None where the sample cannot be scored)."""
    out = []
    for solution, info in samples:
        plain = dict(info)
        if isinstance(plain.get("audio"), dict) and isinstance(plain["audio"].get("array"), torch.Tensor):
            plain["audio"] = {**plain["audio"], "array": plain["audio"]["array"].numpy()}
        try:
            out.append(float(scorer.score([episode_from_verl(solution, plain, SR, "x")]).item()))
        except SdscoreError:  # a bad sample has no in-process score either
            out.append(None)
    return out


def _check(results: list[dict], want: list[float | None], bad: int, reason: str):
    for i, (result, expected) in enumerate(zip(results, want)):
        assert list(result) == list(EXTRA_INFO_KEYS)
        if i == bad:
            assert expected is None
            assert result["score"] == ERROR_REWARD and result["sdscore_failed"] == 1
            assert result["sdscore_error"].startswith(f"sample {i} (speech)") and reason in result["sdscore_error"]
        else:
            assert result["sdscore_failed"] == 0 and result["sdscore_error"] == ""
            assert result["score"] == pytest.approx(expected, abs=1e-5)


# ---- the call reproduced from verl 0.9.1's source (runs without verl) ------------------------------------

async def _naive_run_single(fn, reward_kwargs, data_source, solution_str, extra_info):
    """verl/experimental/reward_loop/reward_manager/naive.py `run_single` after decoding, with
    verl/trainer/ppo/reward.py's `_call_with_kwargs(_async)` merge: reward_kwargs win."""
    call = {"data_source": data_source, "solution_str": solution_str, "ground_truth": None,
            "extra_info": extra_info}
    if asyncio.iscoroutinefunction(fn):
        result = await fn(**{**call, **reward_kwargs})
    else:
        result = await asyncio.get_running_loop().run_in_executor(None, lambda: fn(**{**call, **reward_kwargs}))
    reward_extra_info = {}
    if isinstance(result, dict):
        score = result["score"]
        reward_extra_info.update(result)
    else:
        score = result
        reward_extra_info["acc"] = score
    return {"reward_score": score, "reward_extra_info": reward_extra_info}


@pytest.mark.parametrize("fn", [compute_score, compute_score_sync], ids=["async", "sync"])
def test_reproduced_verl_call_scores_each_sample_and_flags_the_bad_one(server, scorer, samples, fn):
    async def batch():
        return await asyncio.gather(*[_naive_run_single(fn, _kwargs(server), "speech", s, dict(info))
                                      for s, info in samples])

    outputs = asyncio.run(batch())
    # RewardLoopManager.compute_rm_score: the columns are the first sample's keys
    extra = [o["reward_extra_info"] for o in outputs]
    columns = {key: np.array([info[key] for info in extra]) for key in extra[0]}
    assert list(columns) == list(EXTRA_INFO_KEYS) and all(len(v) == len(samples) for v in columns.values())
    assert [o["reward_score"] for o in outputs] == [o["reward_extra_info"]["score"] for o in outputs]
    _check([o["reward_extra_info"] for o in outputs], _one_by_one(scorer, samples), bad=3,
           reason="cannot read")
    json.dumps([o["reward_extra_info"] for o in outputs])  # plain values: verl dumps them to jsonl


def test_sent_paths_and_bad_waveforms_get_the_error_reward_with_the_server_reason(server, scorer, samples):
    kwargs = _kwargs(server, send_paths=True)
    solution, info = samples[0]
    sent = asyncio.run(compute_score("speech", solution, None, info, **kwargs))
    read_here = asyncio.run(compute_score("speech", solution, None, info, **_kwargs(server)))
    assert sent == read_here and sent["sdscore_failed"] == 0
    missing = compute_score_sync("speech", "x", None, {"index": 7, "prompt": "hi",
                                                        "audio": str(server.folder / "gone.wav")}, **kwargs)
    assert missing["sdscore_failed"] == 1 and missing["score"] == ERROR_REWARD
    assert missing["sdscore_error"].startswith("sample 7 (speech): the server refused it (422)")
    assert "gone.wav" in missing["sdscore_error"]
    outside = compute_score_sync("speech", "x", None, {"index": 8, "prompt": "hi", "audio": "/etc/hostname"},
                                 **kwargs)
    assert outside["sdscore_failed"] == 1 and "(403)" in outside["sdscore_error"]
    nan = np.full(800, np.nan, np.float32)
    for audio, reason in [({"array": nan, "sampling_rate": SR}, "NaN"),
                          ({"array": np.zeros(800, np.int16), "sampling_rate": SR}, "float samples"),
                          ({"bytes": b"not audio"}, "(422)"),
                          (np.zeros(800, np.float32), "need their rate")]:
        result = compute_score_sync("speech", "x", None, {"index": 9, "prompt": "hi", "audio": audio}, **kwargs)
        assert result["sdscore_failed"] == 1 and reason in result["sdscore_error"], result
    bare = compute_score_sync("speech", "x", None, {"prompt": "hi", "audio": samples[1][1]["audio"]},
                              **kwargs, audio_sample_rate=SR)
    with_rate = compute_score_sync("speech", "x", None, {"prompt": "hi", "audio": samples[1][1]["audio"],
                                                         "audio_sample_rate": SR}, **kwargs)
    assert bare["score"] == with_rate["score"] and bare["sdscore_failed"] == 0


def test_one_connection_pool_per_process_and_per_loop(server, samples):
    serve_client.close_clients()
    for solution, info in samples[:3]:
        compute_score_sync("speech", solution, None, info, **_kwargs(server))
    config = serve_client.ServeClientConfig(url=server.url, token="verl-test-token")
    client = serve_client._client(config)
    assert len(client._transport._pool.connections) == 1  # three sequential calls, one kept-alive connection

    async def twice():
        await compute_score("speech", "a", None, {"prompt": "hi"}, **_kwargs(server))
        first = serve_client._async_client(config)
        await compute_score("speech", "b", None, {"prompt": "hi"}, **_kwargs(server))
        return first is serve_client._async_client(config)

    assert asyncio.run(twice())


def test_a_server_that_cannot_be_used_raises_naming_its_url(server):
    port = free_port()  # nothing listens there
    with pytest.raises(RewardServerError, match=rf"sdscore serve at http://127.0.0.1:{port}: cannot connect .*2 tries"):
        compute_score_sync("speech", "x", None, {"prompt": "hi"}, url=f"http://127.0.0.1:{port}", retries=1)
    with pytest.raises(RewardServerError, match="refused the bearer token"):
        asyncio.run(compute_score("speech", "x", None, {"prompt": "hi"}, url=server.url,
                                  token_env="SDSCORE_TEST_VERL_NO_SUCH_TOKEN"))
    with pytest.raises(RewardServerError, match="/elsewhere/score answered 404: is this sdscore serve"):
        compute_score_sync("speech", "x", None, {"prompt": "hi"}, **_kwargs(server, url=server.url + "/elsewhere"))


@pytest.mark.parametrize("kwargs,message", [
    ({"urll": "http://x"}, "unknown reward_kwargs urll"),
    ({"url": "localhost:8000"}, "must be an http:// or https:// URL"),
    ({"timeout_s": 0}, "timeout_s must be a positive number"),
    ({"retries": -1}, "retries must be an integer >= 0"),
    ({"error_reward": float("nan")}, "error_reward must be a finite number"),
    ({"criterion": "loudness"}, "criterion must be one of"),
    ({"send_paths": "yes"}, "send_paths must be true or false"),
    ({"audio_sample_rate": 0}, "audio_sample_rate must be a positive integer"),
])
def test_bad_reward_kwargs_raise(kwargs, message):
    with pytest.raises(VerlConfigError, match=message):
        compute_score_sync("speech", "x", None, {"prompt": "hi"}, **kwargs)


def test_url_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("SDSCORE_SERVE_URL", server.url)
    result = compute_score_sync("speech", "hello", None, {"prompt": "hi"}, token_env=TOKEN_ENV)
    assert result["sdscore_failed"] == 0


class _Overloaded(BaseHTTPRequestHandler):
    """Answers 503 (Retry-After: 0) to the first `busy` requests, then a score."""

    busy = 2
    seen = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen += 1
        busy = type(self).seen <= self.busy
        body = json.dumps({"error": "the reward queue is full"} if busy else
                          {"scores": [0.25 * type(self).seen], "errors": [None]}).encode()
        self.send_response(503 if busy else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if busy:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_overloaded_server_is_retried_then_raises():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Overloaded)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        assert compute_score_sync("s", "x", None, {"prompt": "hi"}, url=url, retries=2)["score"] == 0.75
        _Overloaded.seen = 0
        with pytest.raises(RewardServerError, match=r"answered 503 \(the reward queue is full\), 2 tries"):
            asyncio.run(compute_score("s", "x", None, {"prompt": "hi"}, url=url, retries=1))
    finally:
        httpd.shutdown()
        httpd.server_close()


# ---- verl's own reward loop ------------------------------------------------------------------------------

def _verl():
    pytest.importorskip("omegaconf", reason="verl's reward loop is not installed: "
                                            "pip install --no-deps -r tests/requirements-verl.txt")
    return pytest.importorskip("verl.experimental.reward_loop.reward_loop",
                               reason="verl 0.9 is not installed: pip install --no-deps -r tests/requirements-verl.txt")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tiny_reward_models import byte_level_tokenizer

    folder = tmp_path_factory.mktemp("policy-tokenizer")
    byte_level_tokenizer(("<|endoftext|>", "<|im_start|>", "<|im_end|>")).save_pretrained(folder)
    return folder


def _data_proto(tokenizer, samples, prompt_length=8):
    """A batch as verl's agent loop hands it to the reward loop (agent_loop.py `_postprocess`): left-padded
    prompts, right-padded responses ending in EOS, one attention mask over both; the dataset row's
    data_source, reward_model and extra_info as object arrays."""
    from verl import DataProto

    responses = [tokenizer.encode(s, add_special_tokens=False) + [tokenizer.eos_token_id] for s, _ in samples]
    width = max(map(len, responses)) + 3
    pad = tokenizer.pad_token_id
    prompt_ids = torch.full((len(samples), prompt_length), pad)
    response_ids = torch.full((len(samples), width), pad)
    mask = torch.zeros((len(samples), prompt_length + width), dtype=torch.long)
    for i, ids in enumerate(responses):
        prompt = tokenizer.encode("q?", add_special_tokens=False)
        prompt_ids[i, -len(prompt):] = torch.tensor(prompt)
        mask[i, prompt_length - len(prompt):prompt_length] = 1
        response_ids[i, :len(ids)] = torch.tensor(ids)
        mask[i, prompt_length:prompt_length + len(ids)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask,
                 "input_ids": torch.cat([prompt_ids, response_ids], 1)},
        non_tensors={"data_source": np.array(["speech"] * len(samples), dtype=object),
                     "reward_model": np.array([{"ground_truth": None, "style": "model"} for _ in samples], dtype=object),
                     "extra_info": np.array([dict(info) for _, info in samples], dtype=object)})


@pytest.mark.parametrize("manager,module,name", [
    ("naive", "verl_http", "compute_score"), ("naive", "verl_http", "compute_score_sync"),
    ("dapo", "verl_http", "compute_score"),
    ("naive", "verl_adapter", "verl_compute_score"),  # in process: the model loads in the reward worker
])
def test_verl_reward_loop_runs_sdscore(server, scorer, samples, tokenizer_dir, monkeypatch, manager, module, name):
    reward_loop = _verl()
    from omegaconf import OmegaConf
    from sdscore.rl.shared_batchers import close_shared_batchers
    from verl.trainer.ppo.reward import extract_reward

    reward_kwargs = _kwargs(server) if module == "verl_http" else {"error_reward": ERROR_REWARD, "device": "cpu"}
    config = OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": str(tokenizer_dir), "tokenizer_path": None}},
        "reward": {"num_workers": 2, "reward_model": {"enable": False},
                   "reward_manager": {"source": "register", "name": manager},
                   "custom_reward_function": {"path": f"pkg://sdscore.rl.{module}", "name": name,
                                              "reward_kwargs": reward_kwargs}}})
    asyncio.set_event_loop(None)
    worker = reward_loop.RewardLoopWorker(config)  # the body of one reward-loop Ray actor
    assert type(worker.reward_manager).__name__ == {"naive": "NaiveRewardManager", "dapo": "DAPORewardManager"}[manager]
    handle = SimpleNamespace(compute_score_batch=SimpleNamespace(
        remote=lambda chunk: worker.loop.run_until_complete(worker.compute_score_batch(chunk))))
    monkeypatch.setattr(reward_loop, "ray", SimpleNamespace(get=lambda results: results))
    loop_manager = SimpleNamespace(reward_model_manager=None, reward_loop_workers=[handle, handle],
                                   reward_manager_cls=type(worker.reward_manager))
    data = _data_proto(worker.input_tokenizer, samples)
    try:
        out = reward_loop.RewardLoopManager.compute_rm_score(loop_manager, data)
    finally:
        worker.loop.close()
        asyncio.set_event_loop(None)
        close_shared_batchers()
    rm_scores, extra = extract_reward(out)
    assert rm_scores.shape == data.batch["responses"].shape
    assert list(extra) == list(EXTRA_INFO_KEYS) and all(v.shape == (len(samples),) for v in extra.values())
    last = data.batch["attention_mask"][:, data.batch["prompts"].shape[1]:].sum(1) - 1
    np.testing.assert_array_equal(rm_scores[torch.arange(len(samples)), last].numpy(),
                                  np.asarray(extra["score"], np.float32))
    assert float(rm_scores.abs().sum()) == pytest.approx(float(np.abs(extra["score"].astype(float)).sum()), rel=1e-6)
    results = [{k: extra[k][i].item() for k in EXTRA_INFO_KEYS} for i in range(len(samples))]
    _check(results, _one_by_one(scorer, samples), bad=3, reason="missing.wav")


#: the overrides docs/rl.md shows for verl 0.9 (Hydra command-line syntax)
DOC_OVERRIDES = [
    "reward.custom_reward_function.path=pkg://sdscore.rl.verl_http",
    "reward.custom_reward_function.name=compute_score",
    "+reward.custom_reward_function.reward_kwargs.url=http://10.0.0.5:8000",
    "+reward.custom_reward_function.reward_kwargs.error_reward=-3.0",
    "+reward.custom_reward_function.reward_kwargs.timeout_s=60",
]


def test_the_documented_overrides_compose_verl_0_9s_config():
    _verl()
    hydra = pytest.importorskip("hydra", reason="hydra-core is not installed: "
                                                "pip install --no-deps -r tests/requirements-verl.txt")
    import verl
    from hydra.errors import ConfigCompositionException
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import get_custom_reward_fn

    assert verl.__version__.startswith("0.9.")
    folder = str(Path(verl.__file__).parent / "trainer" / "config")
    with hydra.initialize_config_dir(config_dir=folder, version_base=None):
        config = hydra.compose("ppo_trainer", overrides=DOC_OVERRIDES)
        with pytest.raises(ConfigCompositionException, match="reward_kwargs.url"):  # why the docs write `+`
            hydra.compose("ppo_trainer", overrides=[o.lstrip("+") for o in DOC_OVERRIDES])
    fn = get_custom_reward_fn(config)  # what verl's reward loop builds from it
    assert fn.func.__name__ == "_call_with_kwargs_async" and fn.args[0] is compute_score
    assert fn.args[1] == {"url": "http://10.0.0.5:8000", "error_reward": -3.0, "timeout_s": 60}
    assert client_config(fn.args[1]).url == "http://10.0.0.5:8000"
    assert config.reward.reward_manager.name == "naive" and config.reward.num_workers == 8
    with pytest.raises(ValueError, match="Unknown reward manager: batch"):
        get_reward_manager_cls("batch")  # why the batch adapter is gone
