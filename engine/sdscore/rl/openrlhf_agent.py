"""OpenRLHF's agent API (``--train.agent_func_path``): each rollout, with the policy's generated
speech, scored by a running `sdscore serve`.

OpenRLHF 0.11 loads the file given as ``--train.agent_func_path`` and builds its ``AgentExecutor``
with no arguments (openrlhf/trainer/ray/vllm_engine.py `_load_agent_executor`); this module's is a
`MultiTurnAgentExecutor` over `SpeechRewardAgent`, whose one step (``done``) posts the rollout to
the server's ``/get_reward``: ``{"query": [observation + action], "prompts": [prompt], "labels":
[label with "audio": the speech]}``. The server strips special tokens, detects a prompt OpenRLHF
cut, applies its --error-reward and --score-transform (sdscore.rl.openrlhf_format), so this path
and ``--reward.remote_url`` score a rollout alike.

The speech comes from `SpeechRewardAgent.speech(states)`: by default the function named by
``$SDSCORE_OPENRLHF_SPEECH`` (``package.module:function``, called with the step's states, sync or
async), else none (the text alone is scored). Turning the policy's output into audio is the
policy's business (its codec or vocoder), so the usual use is a small agent file of one's own::

    from sdscore.rl.openrlhf_agent import SpeechRewardAgent, executor_for

    class Agent(SpeechRewardAgent):
        url = "http://10.0.0.5:8000"
        error_reward = -3.0

        async def speech(self, states):
            return {"array": my_vocoder(states["action_text"]), "sampling_rate": 24000}

    AgentExecutor = executor_for(Agent)

Audio may be anything `sdscore.rl.episode_json.audio_json` sends: a local path (read here and sent
as bytes, or sent as a path with ``send_paths``), ``{"bytes"}``, ``{"base64"}``, ``{"array",
"sampling_rate"}``, float numpy/torch/DLPack samples. Audio in the dataset label's ``"context"``
messages is sent the same way.

A bad sample never fails the rollout batch: the server's --error-reward covers what fails there
(answered with its reason); what fails here (speech that cannot be read, a label that is not valid
JSON) and a sample a server without --error-reward refuses get ``error_reward`` as reward and score,
``sdscore_failed`` 1 in ``extra_logs`` and a logged warning. A server that cannot be used
(unreachable, wrong token, not sdscore serve, overloaded past the retries) raises
`RewardServerError` naming its URL.

Settings are class attributes (subclass to change them); ``url`` defaults to $SDSCORE_SERVE_URL,
else http://127.0.0.1:8000, and the token is read from the variable named by ``token_env``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import torch

try:
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(f"sdscore.rl.openrlhf_agent is an OpenRLHF agent (--train.agent_func_path) and needs "
                      f"OpenRLHF 0.11 installed ({exc})") from exc

from sdscore.errors import SdscoreError
from sdscore.rl.episode_json import audio_json
from sdscore.rl.episode_specs import EpisodeSpecError, message_parts
from sdscore.rl.openrlhf_format import EXTRA_LOGS
from sdscore.rl.serve_client import ServeClientConfig, aget_reward

log = logging.getLogger(__name__)

URL_ENV = "SDSCORE_SERVE_URL"
DEFAULT_URL = "http://127.0.0.1:8000"
SPEECH_ENV = "SDSCORE_OPENRLHF_SPEECH"


class AgentConfigError(SdscoreError):
    """A SpeechRewardAgent setting that cannot work (a bad URL, a speech function that is not there, ...)."""


class SpeechRewardAgent(AgentInstanceBase):
    """One rollout's environment: one step that scores prompt + action (+ speech) with `sdscore serve`."""

    url: str | None = None
    token_env: str = "SDSCORE_SERVE_TOKEN"
    error_reward: float = 0.0
    send_paths: bool = False
    audio_sample_rate: int | None = None
    timeout_s: float = 150.0
    connect_timeout_s: float = 10.0
    retries: int = 3
    max_connections: int = 64

    def __init__(self, *args: Any, **kwargs: Any):
        self.config = self._client_config()
        self.prompt: str | None = None

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.prompt = states.get("observation")
        return states

    async def speech(self, states: dict) -> Any:
        """The policy's speech for this step's action (an audio spec), or None: the text alone is scored."""
        hook = _speech_function()
        if hook is None:
            return None
        result = hook(states)
        return await result if inspect.isawaitable(result) else result

    async def step(self, states: dict, **kwargs: Any) -> dict:
        observation, action = states.get("observation_text") or "", states.get("action_text") or ""
        where = "rollout"
        try:
            label = _label_object(states.get("label"), where)
            spec = await self.speech(states)
            # reading files and encoding waveforms stays off the event loop the rollouts share
            label = await asyncio.get_running_loop().run_in_executor(None, self._portable_label, label, spec, where)
        except EpisodeSpecError as exc:
            return self._failed(states, str(exc))
        prompt = self.prompt if isinstance(self.prompt, str) else observation
        reply, refused = await aget_reward(self.config, {"query": [observation + action], "prompts": [prompt],
                                                         "labels": [label]})
        if refused is not None:
            return self._failed(states, f"{where}: {refused}")
        reason = (reply.get("errors") or [None])[0]
        if reason is not None:
            log.warning("sdscore reward: %s (reward %g)", reason, reply["rewards"][0])
        logs = reply.get("extra_logs") or {}
        extra = {key: float(logs[key][0]) if isinstance(logs.get(key), list) and logs[key] else 0.0
                 for key in EXTRA_LOGS}
        return _step_result(states, float(reply["rewards"][0]), float(reply["scores"][0]), extra)

    def _portable_label(self, label: dict, spec: Any, where: str) -> dict:
        """`label` with the speech as its "audio" and every audio in it as the server reads it."""
        label = dict(label)
        options = {"default_rate": self.audio_sample_rate, "send_paths": self.send_paths}
        if spec is not None:
            label["audio"] = audio_json(spec, f"{where}: the speech", **options)
        elif label.get("audio") is not None:
            label["audio"] = audio_json(label["audio"], f"{where}: label audio", **options)
        if label.get("context") is not None:
            messages = []
            for role, text, audio, audio_where in message_parts(label["context"], f"{where}: label context"):
                content: list[dict] = [] if text is None else [{"type": "text", "text": text}]
                if audio is not None:
                    content.append({"type": "audio", "audio": audio_json(audio, audio_where, **options)})
                messages.append({"role": role, "content": content})
            label["context"] = messages
        return label

    def _failed(self, states: dict, reason: str) -> dict:
        log.warning("sdscore reward: %s (reward %g)", reason, self.error_reward)
        extra = dict.fromkeys(EXTRA_LOGS, 0.0)
        extra["sdscore_failed"] = 1.0
        return _step_result(states, float(self.error_reward), float(self.error_reward), extra)

    def _client_config(self) -> ServeClientConfig:
        name = type(self).__name__
        url = self.url or os.environ.get(URL_ENV) or DEFAULT_URL
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise AgentConfigError(f"{name}.url (or ${URL_ENV}) must be an http:// or https:// URL, got {url!r}")
        if not isinstance(self.token_env, str) or not self.token_env:
            raise AgentConfigError(f"{name}.token_env must name an environment variable, got {self.token_env!r}")
        for attr in ("error_reward", "timeout_s", "connect_timeout_s"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                    attr != "error_reward" and value <= 0):
                raise AgentConfigError(f"{name}.{attr} must be a {'finite' if attr == 'error_reward' else 'positive'}"
                                       f" number, got {value!r}")
        for attr, least in (("retries", 0), ("max_connections", 1)):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise AgentConfigError(f"{name}.{attr} must be an integer >= {least}, got {value!r}")
        return ServeClientConfig(url=url, token=os.environ.get(self.token_env) or None, timeout_s=float(self.timeout_s),
                                 connect_timeout_s=float(self.connect_timeout_s), retries=self.retries,
                                 max_connections=self.max_connections)


def _step_result(states: dict, reward: float, score: float, extra_logs: dict) -> dict:
    """What MultiTurnAgentExecutor reads from a step (openrlhf/utils/agent.py): one step, done."""
    return {"rewards": torch.tensor(reward), "scores": torch.tensor(score), "environment_feedback": "",
            "done": True, "sampling_params": states.get("sampling_params"), "extra_logs": extra_logs}


def _label_object(label: Any, where: str) -> dict:
    """The dataset label as an object: a dict, a JSON object string, or {} for any other label."""
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            label = json.loads(label)
        except json.JSONDecodeError as exc:
            raise EpisodeSpecError(f"{where}: the label is not valid JSON ({exc})") from None
    return dict(label) if isinstance(label, Mapping) else {}


def _speech_function():
    spec = os.environ.get(SPEECH_ENV)
    if not spec:
        return None
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise AgentConfigError(f"${SPEECH_ENV} must be package.module:function, got {spec!r}")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise AgentConfigError(f"${SPEECH_ENV}={spec}: cannot load it ({exc})") from None
    if not callable(function):
        raise AgentConfigError(f"${SPEECH_ENV}={spec}: not a function")
    return function


def executor_for(agent_class: type[SpeechRewardAgent]) -> type[MultiTurnAgentExecutor]:
    """The ``AgentExecutor`` class OpenRLHF builds with no arguments, running `agent_class`."""
    if not (isinstance(agent_class, type) and issubclass(agent_class, AgentInstanceBase)):
        raise AgentConfigError(f"executor_for takes an AgentInstanceBase subclass, got {agent_class!r}")

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(agent_class)

    AgentExecutor.__qualname__ = f"AgentExecutor[{agent_class.__name__}]"
    return AgentExecutor


#: what ``--train.agent_func_path`` finds when given this file
AgentExecutor = executor_for(SpeechRewardAgent)
