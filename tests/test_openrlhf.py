"""`sdscore serve`'s ``/get_reward`` and sdscore.rl.openrlhf_agent called by OpenRLHF 0.11's own code.

With OpenRLHF installed (``pip install --no-deps -r tests/requirements-openrlhf.txt``: openrlhf 0.11.2
without its training and rollout stack):

- the remote-RM path: OpenRLHF's `SingleTurnAgentExecutor.execute` (openrlhf/utils/agent.py) tokenizes
  each prompt — cutting it from the left when it is longer than ``max_length - max_tokens`` — asks
  the rollout engine for a reply, decodes prompt + reply with ``skip_special_tokens=False`` and
  posts it with its own aiohttp client (`_fetch_rewards_via_http`) to a real `sdscore serve` (the
  CLI, in a subprocess, on the shipped compact model); prompts and labels come from dataset rows
  through OpenRLHF's `preprocess_data` (openrlhf/datasets/prompts_dataset.py) with the policy
  tokenizer's chat template;
- the agent path: OpenRLHF's `_load_agent_executor` (openrlhf/trainer/ray/vllm_engine.py) loads
  sdscore/rl/openrlhf_agent.py, or an agent file of the user's, and its `MultiTurnAgentExecutor`
  runs the rollout through our agent's `step`;
- every result goes through OpenRLHF's `SamplesGenerator._process_response_into_experience`
  (openrlhf/trainer/ppo_utils/samples_generator.py) and `make_experience_batch`
  (openrlhf/trainer/ppo_utils/experience.py), as a training step would.

vllm_engine.py and samples_generator.py import vllm and ray at the top: they are loaded from the
installed files with those modules stubbed, as OpenRLHF 0.11.2's own tests/test_agent.py loads
them. The rollout engine is a stand-in that answers each prompt with a fixed reply ending in EOS;
the policy tokenizer is a byte-level one with ChatML special tokens and EOS ``</s>``. Reference
scores come from the same model in process, on the clean text (every special token removed).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import MagicMock

import numpy as np
import pytest
import torch
from sdscore.models.episodes import Episode, Turn
from sdscore.rl.batcher import RewardBatcher
from sdscore.rl.episode_specs import audio_from_spec
from sdscore.rl.openrlhf_format import (
    DEFAULT_STRIP_TOKENS,
    EXTRA_LOGS,
    RewardFormat,
    RewardFormatError,
    policy_special_tokens,
    prefix_end,
    sample_messages,
    PromptMismatch,
)
from sdscore.rl.server import ServerConfigError, ServerLimits, create_app

from rl_episodes import SR, compact_scorer, wav_bytes, wave
from serve_process import free_port, serve_app, serve_process

pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")
openrlhf_agent_api = pytest.importorskip(
    "openrlhf.utils.agent", reason="OpenRLHF 0.11 is not installed: pip install --no-deps -r tests/requirements-openrlhf.txt")

import openrlhf  # noqa: E402
from openrlhf.datasets.prompts_dataset import preprocess_data  # noqa: E402
from openrlhf.trainer.ppo_utils.experience import make_experience_batch  # noqa: E402
from sdscore.rl import openrlhf_agent  # noqa: E402
from sdscore.rl.openrlhf_agent import AgentConfigError, SpeechRewardAgent, executor_for  # noqa: E402
from sdscore.rl.serve_client import RewardServerError  # noqa: E402

ERROR_REWARD = -4.5
POLICY_SPECIALS = ("</s>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|speech_end|>")
OPENRLHF_FILES = Path(openrlhf.__file__).parent


def clean(text: str) -> str:
    """`text` without the policy's special tokens (the reference the scores are compared with)."""
    for token in POLICY_SPECIALS:
        text = text.replace(token, "")
    return text


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---- fixtures -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tiny_reward_models import CHATML_TEMPLATE, byte_level_tokenizer

    folder = tmp_path_factory.mktemp("policy")
    tokenizer = byte_level_tokenizer(POLICY_SPECIALS, eos="</s>", pad="<|endoftext|>", chat_template=CHATML_TEMPLATE)
    tokenizer.add_tokens(list(POLICY_SPECIALS), special_tokens=True)  # one special token each, as in a real policy's
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer_dir):
    """`sdscore serve` as the docs show it for OpenRLHF: an error reward, the policy's tokenizer, the
    sigmoid score transform, and one folder where audio paths are allowed."""
    folder = tmp_path_factory.mktemp("allowed")
    options = ["--allow-paths", str(folder), "--error-reward", str(ERROR_REWARD), "--policy-tokenizer",
               str(tokenizer_dir), "--score-transform", "sigmoid"]
    with serve_process(options) as url:
        yield SimpleNamespace(url=url, folder=folder)


@pytest.fixture(scope="module")
def scorer():
    return compact_scorer()


@pytest.fixture
def openrlhf_modules(monkeypatch):
    """OpenRLHF's vllm_engine.py and samples_generator.py, loaded from the installed files with
    vllm and ray stubbed (they import both at the top), as OpenRLHF's own tests/test_agent.py does."""
    for name in ("vllm", "vllm.inputs", "vllm.utils", "ray", "ray.util", "ray.util.placement_group",
                 "ray.util.scheduling_strategies", "openrlhf.trainer.ray.utils"):
        monkeypatch.setitem(sys.modules, name, MagicMock())
    modules = {}
    for name, path in (("openrlhf.trainer.ray.vllm_engine", "trainer/ray/vllm_engine.py"),
                       ("openrlhf.trainer.ppo_utils.samples_generator", "trainer/ppo_utils/samples_generator.py")):
        spec = importlib.util.spec_from_file_location(name, OPENRLHF_FILES / path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        modules[name.rpartition(".")[2]] = module
    return SimpleNamespace(**modules)


class Policy:
    """Stands in for OpenRLHF's vLLM rollout engine (`RolloutRayActor.generate`): the reply to every
    prompt is `reply` followed by EOS, as token ids and as text decoded with special tokens."""

    def __init__(self, tokenizer, reply: str):
        self.ids = tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_token_id]
        self.text = tokenizer.decode(self.ids, skip_special_tokens=False)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.prompts.append(list(prompt_token_ids))
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=list(self.ids), text=self.text,
                                                        finish_reason="stop", logprobs=None)])


def _row(tokenizer, text, label):
    """(prompt, label) of one dataset row as OpenRLHF's PromptDataset makes them (--data.apply_chat_template)."""
    return preprocess_data({"input": text, "label": label}, input_template=None, input_key="input", label_key="label",
                           apply_chat_template=tokenizer.apply_chat_template)


def _rollout(executor, tokenizer, prompt, label, reply, max_length=2048, max_tokens=64):
    """One rollout as RolloutRayActor.generate_responses runs it: executor.execute(...)."""
    sampling = SimpleNamespace(max_tokens=max_tokens, logprobs=None)
    return executor.execute(prompt=prompt, label=label, sampling_params=sampling, max_length=max_length,
                            hf_tokenizer=tokenizer, llm_engine=Policy(tokenizer, reply))


def _column(batch, key) -> list[float]:
    """One info column of a batch, as OpenRLHF's trainer reads it (ppo_trainer.py: torch.cat of the info tensors)."""
    return torch.cat([t.flatten() for t in batch.info[key]]).tolist()


def _experiences(modules, outputs, max_len=2048):
    generator = modules.samples_generator.SamplesGenerator.__new__(modules.samples_generator.SamplesGenerator)
    experiences = [generator._process_response_into_experience(o, max_len=max_len) for o in outputs]
    return experiences, make_experience_batch(experiences)


# ---- the remote-RM path: SingleTurnAgentExecutor against sdscore serve -----------------------------------

@pytest.fixture(scope="module")
def remote_rows(server):
    """Dataset rows (input, label, the policy's reply, max_length) in every form OpenRLHF hands labels
    over; rows 3-5 cannot be scored: a missing audio file, a prompt OpenRLHF cuts, a label whose
    audio is a number."""
    rng = np.random.default_rng(41)
    a1, q2, a2 = wave(rng, 0.7), wave(rng, 0.8), wave(rng, 0.6)
    (server.folder / "q2.wav").write_bytes(wav_bytes(q2))
    (server.folder / "a2.wav").write_bytes(wav_bytes(a2))
    b64 = base64.b64encode(wav_bytes(a1)).decode()
    context2 = [{"role": "user", "content": [{"type": "text", "text": "can you book a table for two?"},
                                             {"type": "audio", "audio": str(server.folder / "q2.wav")}]}]
    return [
        ("how are you?", "", "fine, thanks", 2048),
        ("what is the weather like?", {"audio": {"base64": b64}}, "it is sunny", 2048),
        ("book a table", json.dumps({"context": context2, "audio": str(server.folder / "a2.wav")}),
         "done, seven pm", 2048),
        ("say something", {"audio": str(server.folder / "missing.wav")}, "something", 2048),
        ("please " * 30 + "tell me a joke", "", "why did the chicken", 160),
        ("hello", {"audio": 5}, "hi", 2048),
    ], {"a1": a1, "q2": server.folder / "q2.wav", "a2": server.folder / "a2.wav"}


def _remote_references(scorer, tokenizer, rows, audio):
    """In-process scores on the clean text of rows 0-2."""
    prompts = [_row(tokenizer, text, label)[0] for text, label, _, _ in rows]
    a1 = audio_from_spec({"bytes": wav_bytes(audio["a1"])}, SR, "a1")
    episodes = [Episode((Turn("user", clean(prompts[0])), Turn("assistant", "fine, thanks"))),
                Episode((Turn("user", clean(prompts[1])), Turn("assistant", "it is sunny", a1))),
                Episode((Turn("user", "can you book a table for two?", str(audio["q2"])),
                         Turn("assistant", "done, seven pm", str(audio["a2"]))))]
    return [float(s) for s in scorer.score(episodes)]


def test_openrlhf_remote_rm_client_scores_each_rollout_and_flags_the_bad_ones(server, scorer, tokenizer, remote_rows,
                                                                                openrlhf_modules):
    rows, audio = remote_rows
    executor = openrlhf_agent_api.SingleTurnAgentExecutor(server.url + "/get_reward")  # --reward.remote_url

    async def rollouts():
        return await asyncio.gather(*[_rollout(executor, tokenizer, *_row(tokenizer, text, label), reply, max_length)
                                      for text, label, reply, max_length in rows])

    outputs = asyncio.run(rollouts())
    want = _remote_references(scorer, tokenizer, rows, audio)
    for i, output in enumerate(outputs):
        assert set(output["extra_logs"]) == set(EXTRA_LOGS)
        (reward,), (score,) = output["reward"], output["scores"]
        assert score == pytest.approx(sigmoid(reward), abs=1e-12)  # --score-transform sigmoid; rewards raw
        assert output["extra_logs"]["sdscore_failed"] == [float(i >= 3)]
        assert output["extra_logs"]["sdscore_prompt_truncated"] == [float(i == 4)]
        if i < 3:
            assert reward == pytest.approx(want[i], abs=1e-5)
        else:
            assert reward == ERROR_REWARD
    # OpenRLHF's own client shows what it sent: the EOS and chat tokens were in the query
    cut_query = tokenizer.decode(outputs[4]["observation_tokens"], skip_special_tokens=False)
    assert not cut_query.startswith(outputs[4]["prompt"]) and cut_query.endswith("</s>")
    # the reasons (the reply's "errors"; OpenRLHF keeps only rewards, scores and extra_logs)
    for i, reason in ((3, "missing.wav"), (4, "cut the prompt from the left"), (5, "got int")):
        query = tokenizer.decode(outputs[i]["observation_tokens"], skip_special_tokens=False)
        reply, = asyncio.run(executor._fetch_rewards_via_http([query], [outputs[i]["prompt"]], [outputs[i]["label"]]))
        assert reply["errors"][0].startswith("query[0]") and reason in reply["errors"][0], reply
        assert reply["rewards"] == [ERROR_REWARD]
    # as a training step turns them into experiences: same shapes as OpenRLHF's own serve_rm reply
    experiences, batch = _experiences(openrlhf_modules, outputs)
    own = dict(outputs[0], reward=[1.0], scores=[1.0], extra_logs={"dummy_scores": [1.0]})  # openrlhf/cli/serve_rm.py
    reference, _ = _experiences(openrlhf_modules, [own])
    assert experiences[0].rewards.shape == reference[0].rewards.shape == (1, 1)
    assert experiences[0].scores.shape == reference[0].scores.shape
    assert experiences[0].info["sdscore_failed"].shape == reference[0].info["dummy_scores"].shape
    np.testing.assert_allclose(_column(batch, "reward"), [o["reward"][0] for o in outputs], rtol=1e-6)
    assert _column(batch, "sdscore_failed") == [0, 0, 0, 1, 1, 1]
    assert _column(batch, "sdscore_prompt_truncated") == [0, 0, 0, 0, 1, 0]
    # OpenRLHF's dynamic filter (samples_generator.py, default range (0, 1)) reads scores: all inside
    assert all(0 < e.scores[0].item() < 1 for e in experiences)
    json.dumps([o["extra_logs"] for o in outputs])
    # why the reasons are not in extra_logs: OpenRLHF makes a tensor of every value there
    generator = openrlhf_modules.samples_generator.SamplesGenerator.__new__(
        openrlhf_modules.samples_generator.SamplesGenerator)
    with pytest.raises(ValueError, match="too many dimensions 'str'"):
        generator._process_response_into_experience(dict(outputs[3], extra_logs={"reason": ["missing.wav"]}))


def test_eos_and_chat_tokens_are_stripped_before_scoring(server, scorer, tokenizer):
    executor = openrlhf_agent_api.SingleTurnAgentExecutor(server.url + "/get_reward")
    prompt, _ = _row(tokenizer, "how are you?", "")
    queries = [prompt + "fine, thanks</s>", prompt + "fine, thanks", prompt + "fine, thanks<|speech_end|></s>"]

    async def fetch():
        return await asyncio.gather(*[executor._fetch_rewards_via_http([q], [prompt], [""]) for q in queries])

    rewards = [reply[0]["rewards"][0] for reply in asyncio.run(fetch())]
    want = float(scorer.score([Episode((Turn("user", clean(prompt)), Turn("assistant", "fine, thanks")))]).item())
    assert rewards == pytest.approx([want] * 3, abs=1e-5)
    with_eos = float(scorer.score([Episode((Turn("user", clean(prompt)), Turn("assistant", "fine, thanks</s>")))]).item())
    assert abs(with_eos - want) > 1e-4  # what scoring the EOS as text would have given


# ---- the agent path: MultiTurnAgentExecutor running sdscore.rl.openrlhf_agent ----------------------------

SPEECH_AGENT = '''
import numpy as np
from sdscore.rl.openrlhf_agent import SpeechRewardAgent, executor_for

SPEECH = {speech!r}


class Agent(SpeechRewardAgent):
    url = {url!r}
    error_reward = {error_reward!r}

    async def speech(self, states):  # the policy's "vocoder": the reply's speech, by its text
        found = SPEECH[states["action_text"].replace("</s>", "")]
        return {{"array": np.load(found), "sampling_rate": 24000}} if found.endswith(".npy") else found


AgentExecutor = executor_for(Agent)
'''


def test_openrlhf_agent_scores_the_policys_generated_speech(server, scorer, tokenizer, openrlhf_modules,
                                                            tmp_path):
    rng = np.random.default_rng(43)
    speech24k = (0.3 * rng.standard_normal(int(0.8 * 24000))).astype(np.float32)
    np.save(tmp_path / "fine.npy", speech24k)
    spoken = wave(rng, 0.5)
    (tmp_path / "sunny.wav").write_bytes(wav_bytes(spoken))
    speech = {"fine, thanks": str(tmp_path / "fine.npy"), "it is sunny": str(tmp_path / "sunny.wav"),
              "lost": str(tmp_path / "lost.wav"), "why did the chicken": str(tmp_path / "sunny.wav")}
    agent_file = tmp_path / "speech_agent.py"
    agent_file.write_text(SPEECH_AGENT.format(speech=speech, url=server.url, error_reward=ERROR_REWARD))
    executor = openrlhf_modules.vllm_engine._load_agent_executor(str(agent_file))  # --train.agent_func_path
    assert isinstance(executor, openrlhf_agent_api.MultiTurnAgentExecutor)
    rows = [("how are you?", "", "fine, thanks", 2048),
            ("what is the weather like?", json.dumps({"reference": "sunny"}), "it is sunny", 2048),
            ("say something", "", "lost", 2048),
            ("please " * 30 + "tell me a joke", "", "why did the chicken", 160)]

    async def rollouts():
        return await asyncio.gather(*[_rollout(executor, tokenizer, *_row(tokenizer, text, label), reply, max_length)
                                      for text, label, reply, max_length in rows])

    outputs = asyncio.run(rollouts())
    prompts = [o["prompt"] for o in outputs]
    want = scorer.score([
        Episode((Turn("user", clean(prompts[0])),
                 Turn("assistant", "fine, thanks", audio_from_spec({"array": speech24k, "sampling_rate": 24000},
                                                                   SR, "x")))),
        Episode((Turn("user", clean(prompts[1])), Turn("assistant", "it is sunny", str(tmp_path / "sunny.wav"))))])
    assert [o["reward"] for o in outputs[:2]] == pytest.approx([float(w) for w in want], abs=1e-5)
    assert [o["scores"].item() for o in outputs[:2]] == pytest.approx([sigmoid(o["reward"]) for o in outputs[:2]])
    assert outputs[2]["reward"] == ERROR_REWARD and outputs[2]["scores"].item() == ERROR_REWARD  # failed here
    assert outputs[3]["reward"] == ERROR_REWARD  # failed in the server: its prompt was cut
    assert outputs[3]["scores"].item() == pytest.approx(sigmoid(ERROR_REWARD))
    assert [o["extra_logs"] for o in outputs] == [
        {"sdscore_failed": 0.0, "sdscore_prompt_truncated": 0.0}, {"sdscore_failed": 0.0, "sdscore_prompt_truncated": 0.0},
        {"sdscore_failed": 1.0, "sdscore_prompt_truncated": 0.0}, {"sdscore_failed": 1.0, "sdscore_prompt_truncated": 1.0}]
    assert all(o["action_ranges"] and o["observation_tokens"][-1] == tokenizer.eos_token_id for o in outputs)
    experiences, batch = _experiences(openrlhf_modules, outputs)
    assert _column(batch, "sdscore_failed") == [0, 0, 1, 1]
    np.testing.assert_allclose(_column(batch, "reward"), [o["reward"] for o in outputs], rtol=1e-6)


def test_the_module_itself_is_an_agent_file_with_a_speech_function(server, scorer, tokenizer, openrlhf_modules,
                                                                  tmp_path, monkeypatch):
    rng = np.random.default_rng(47)
    spoken = wave(rng, 0.6)
    (tmp_path / "said.wav").write_bytes(wav_bytes(spoken))
    (tmp_path / "openrlhf_test_speech.py").write_text(
        f"def speech(states):\n    return {str(tmp_path / 'said.wav')!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SDSCORE_SERVE_URL", server.url)
    monkeypatch.setenv("SDSCORE_OPENRLHF_SPEECH", "openrlhf_test_speech:speech")
    executor = openrlhf_modules.vllm_engine._load_agent_executor(openrlhf_agent.__file__)
    prompt, label = _row(tokenizer, "how are you?", "")
    output = asyncio.run(_rollout(executor, tokenizer, prompt, label, "fine, thanks"))
    want = scorer.score([Episode((Turn("user", clean(prompt)), Turn("assistant", "fine, thanks",
                                                                    str(tmp_path / "said.wav"))))])
    assert output["reward"] == pytest.approx(float(want[0]), abs=1e-5)
    assert output["extra_logs"]["sdscore_failed"] == 0.0
    monkeypatch.delenv("SDSCORE_OPENRLHF_SPEECH")  # no speech function: the text alone
    text_only = asyncio.run(_rollout(executor, tokenizer, prompt, label, "fine, thanks"))
    want = scorer.score([Episode((Turn("user", clean(prompt)), Turn("assistant", "fine, thanks")))])
    assert text_only["reward"] == pytest.approx(float(want[0]), abs=1e-5)


def _step(agent_class, label="", prompt="hi ", action="there</s>"):
    async def run():
        agent = agent_class()
        await agent.reset({"observation": prompt, "label": label})
        return await agent.step({"observation_text": prompt, "action_text": action, "label": label,
                                 "sampling_params": None})

    return asyncio.run(run())


def test_agent_token_refusals_and_a_server_without_error_reward(scorer, tmp_path):
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    app = create_app(RewardBatcher(scorer, max_wait_ms=1), token="agent-token",
                     limits=ServerLimits(allow_paths=(tmp_path,)))  # no error_reward: a bad sample gets 422
    with serve_app(app) as url:
        class Agent(SpeechRewardAgent):
            token_env = "SDSCORE_TEST_OPENRLHF_AGENT_TOKEN"
            error_reward = -2.0
        Agent.url = url
        with pytest.raises(RewardServerError, match="refused the bearer token"):
            _step(Agent)
        os.environ[Agent.token_env] = "agent-token"
        try:
            good = _step(Agent)
            assert good["extra_logs"] == {"sdscore_failed": 0.0, "sdscore_prompt_truncated": 0.0}
            want = scorer.score([Episode((Turn("user", "hi "), Turn("assistant", "there")))])
            assert good["rewards"].item() == pytest.approx(float(want[0]), abs=1e-5)
            assert good["done"] is True and good["environment_feedback"] == ""
            refused = _step(Agent, label={"context": [{"role": "user", "content": [
                {"type": "audio", "audio": {"path": str(tmp_path / "bad.wav")}}]}]})
            assert refused["rewards"].item() == -2.0 and refused["extra_logs"]["sdscore_failed"] == 1.0
            bad_json = _step(Agent, label='{"audio": ')
            assert bad_json["rewards"].item() == -2.0 and bad_json["scores"].item() == -2.0
        finally:
            os.environ.pop(Agent.token_env, None)

    class Nowhere(SpeechRewardAgent):
        url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        retries = 0
    with pytest.raises(RewardServerError, match="cannot connect"):
        _step(Nowhere)


@pytest.mark.parametrize("attrs,message", [
    ({"url": "localhost:8000"}, "url .* must be an http:// or https:// URL"),
    ({"error_reward": float("nan")}, "error_reward must be a finite number"),
    ({"timeout_s": 0}, "timeout_s must be a positive number"),
    ({"retries": -1}, "retries must be an integer >= 0"),
    ({"token_env": ""}, "token_env must name an environment variable"),
])
def test_bad_agent_settings_raise(attrs, message):
    with pytest.raises(AgentConfigError, match=message):
        type("Agent", (SpeechRewardAgent,), attrs)()


@pytest.mark.parametrize("value,message", [("speech", "must be package.module:function"),
                                           ("json:no_such_function", "cannot load it"),
                                           ("json:__doc__", "not a function")])
def test_a_bad_speech_function_setting_raises(monkeypatch, value, message):
    monkeypatch.setenv("SDSCORE_OPENRLHF_SPEECH", value)
    with pytest.raises(AgentConfigError, match=message):
        asyncio.run(SpeechRewardAgent().speech({}))


def test_executor_for_takes_an_agent_class():
    with pytest.raises(AgentConfigError, match="takes an AgentInstanceBase subclass"):
        executor_for(int)
    assert issubclass(openrlhf_agent.AgentExecutor, openrlhf_agent_api.AgentExecutorBase)


# ---- /get_reward's options, in process -------------------------------------------------------------------

def test_default_strip_list_and_minmax_scores(scorer):
    executor_format = RewardFormat(score_transform="minmax", score_range=(-3.0, 3.0))
    app = create_app(RewardBatcher(scorer, max_wait_ms=1), limits=ServerLimits(error_reward=-3.0),
                     reward_format=executor_format)
    endings = ["", "</s>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>"]
    with serve_app(app) as url:
        executor = openrlhf_agent_api.SingleTurnAgentExecutor(url + "/get_reward")

        async def fetch():
            return await asyncio.gather(*[executor._fetch_rewards_via_http(
                [f"<|im_start|>user\nhow are you?<|im_end|>\n<|im_start|>assistant\nfine, thanks{end}"],
                ["<|im_start|>user\nhow are you?<|im_end|>\n<|im_start|>assistant\n"], [""]) for end in endings])

        replies = [r[0] for r in asyncio.run(fetch())]
    rewards = [r["rewards"][0] for r in replies]
    want = float(scorer.score([Episode((Turn("user", "user\nhow are you?\nassistant\n"),
                                        Turn("assistant", "fine, thanks")))]).item())
    assert rewards == pytest.approx([want] * len(endings), abs=1e-5)
    assert [r["scores"][0] for r in replies] == pytest.approx([min(1, max(0, (r + 3) / 6)) for r in rewards])


def test_every_bad_label_gets_the_error_reward_with_its_reason(scorer):
    import httpx

    labels = [{"audio": 5}, {"audio": []}, {"context": "hi"}, {"context": [5]}, {"context": [{"role": "robot"}]},
              {"audio": {"base64": "@@"}}, '{"audio": ', {"audio": {"array": [0.1, 0.2]}}, "a reference answer"]
    app = create_app(RewardBatcher(scorer, max_wait_ms=1), limits=ServerLimits(error_reward=-1.0))
    with serve_app(app) as url:
        reply = httpx.post(url + "/get_reward", json={"query": ["q a"] * len(labels), "prompts": ["q"] * len(labels),
                                                      "labels": labels}, timeout=60)
        assert reply.status_code == 200, reply.text
        reply = reply.json()
        assert reply["rewards"][:-1] == [-1.0] * (len(labels) - 1) and reply["rewards"][-1] != -1.0
        assert reply["extra_logs"]["sdscore_failed"] == [1.0] * (len(labels) - 1) + [0.0]
        assert all(e.startswith(f"query[{i}]") for i, e in enumerate(reply["errors"][:-1])), reply["errors"]
        assert reply["errors"][-1] is None
        refused = httpx.post(url + "/get_reward", json={"query": ["q a"], "prompts": [3]}, timeout=60)
        assert refused.status_code == 422 and "'prompts' must be a list of strings" in refused.json()["error"]


def test_without_error_reward_a_cut_prompt_answers_422_naming_it(scorer):
    import httpx

    app = create_app(RewardBatcher(scorer, max_wait_ms=1))
    with serve_app(app) as url:
        reply = httpx.post(url + "/get_reward", json={"query": ["you today? fine"],
                                                      "prompts": ["hello there, how are you today? "]}, timeout=60)
    assert reply.status_code == 422 and "query[0]: the query starts" in reply.json()["error"]


# ---- units -----------------------------------------------------------------------------------------------

def test_score_transforms():
    assert RewardFormat().score(-2.5) == -2.5
    sig = RewardFormat(score_transform="sigmoid")
    assert sig.score(0.0) == 0.5 and sig.score(2.0) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert sig.score(-1000.0) == 0.0 and sig.score(1000.0) == 1.0  # no overflow
    mm = RewardFormat(score_transform="minmax", score_range=(-3, 3))
    assert [mm.score(r) for r in (-10.0, -3.0, 0.0, 1.5, 3.0, 7.0)] == [0.0, 0.0, 0.5, 0.75, 1.0, 1.0]


@pytest.mark.parametrize("options,message", [
    ({"score_transform": "tanh"}, "must be one of none, sigmoid, minmax"),
    ({"score_transform": "minmax"}, "needs the reward range"),
    ({"score_transform": "minmax", "score_range": (1.0, 1.0)}, "finite LOW < HIGH"),
    ({"score_transform": "minmax", "score_range": (0.0, float("inf"))}, "finite LOW < HIGH"),
    ({"score_transform": "minmax", "score_range": ("a", 1)}, "two numbers LOW HIGH"),
    ({"score_transform": "sigmoid", "score_range": (0.0, 1.0)}, "only by the minmax"),
    ({"strip_tokens": "</s>"}, "a list of tokens"),
    ({"strip_tokens": ["</s>", ""]}, "non-empty strings"),
])
def test_bad_reward_format_raises(options, message):
    with pytest.raises(RewardFormatError, match=message):
        RewardFormat(**options)


def test_server_limits_refuse_a_non_finite_error_reward():
    with pytest.raises(ServerConfigError, match="error_reward must be a finite number"):
        ServerLimits(error_reward=float("nan"))


def test_prompt_matching():
    assert prefix_end("How are you? fine", "How are you ? ") == len("How are you? ")  # decode cleaned up spaces
    assert prefix_end(" hello there", "hello ") == len(" hello ")
    assert prefix_end("abc", "abd") is None
    fmt = RewardFormat()
    assert sample_messages("q? fine</s>", "q? ", None, "query[0]", fmt)[-1] == {"role": "assistant", "content": "fine"}
    assert sample_messages("just text<|eot_id|>", None, None, "query[0]", fmt) == [
        {"role": "assistant", "content": "just text"}]
    with pytest.raises(PromptMismatch, match="starts 15 non-blank characters into its prompt") as cut:
        sample_messages("\ufffdre you today?\nfine", "hello there, how are you today?\n", None, "query[0]", fmt)
    assert cut.value.truncated
    with pytest.raises(PromptMismatch, match="does not start with its prompt") as other:
        sample_messages("something else", "hello there", None, "query[0]", fmt)
    assert not other.value.truncated
    assert "</s>" in DEFAULT_STRIP_TOKENS and "<|im_end|>" in DEFAULT_STRIP_TOKENS


def test_policy_special_tokens(tokenizer_dir, tmp_path):
    tokens = policy_special_tokens(tokenizer_dir)
    assert set(POLICY_SPECIALS) <= set(tokens)
    with pytest.raises(RewardFormatError, match="not an existing folder"):
        policy_special_tokens(tmp_path / "nowhere")
    with pytest.raises(RewardFormatError, match="cannot load a tokenizer there"):
        policy_special_tokens(tmp_path)


def test_serve_refuses_bad_reward_options_before_loading_a_model(capsys, tmp_path):
    from sdscore.cli import main

    assert main(["serve", "--score-transform", "minmax"]) == 2
    assert "--score-range LOW HIGH" in capsys.readouterr().err
    assert main(["serve", "--policy-tokenizer", str(tmp_path / "none")]) == 2
    assert "not an existing folder" in capsys.readouterr().err
    assert main(["serve", "--error-reward", "nan"]) == 2
    assert "error_reward must be a finite number" in capsys.readouterr().err


#: the OpenRLHF 0.11 flags docs/rl.md uses
DOC_FLAGS = ["--reward.remote_url", "--train.agent_func_path", "--data.apply_chat_template", "--data.label_key",
             "--data.max_len", "--rollout.max_new_tokens", "--algo.dynamic_filtering_enable",
             "--algo.dynamic_filtering_range"]


def test_the_documented_flags_are_openrlhf_0_11s():
    assert openrlhf_agent_api is not None and (OPENRLHF_FILES / "cli" / "train_ppo_ray.py").is_file()
    from importlib.metadata import version

    assert version("openrlhf").startswith("0.11.")
    source = (OPENRLHF_FILES / "cli" / "train_ppo_ray.py").read_text()
    assert [f for f in DOC_FLAGS if f'"{f}"' not in source] == []
