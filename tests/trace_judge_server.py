"""Fake-judge behaviour for the TRACE original-label and feature-ablation tests, on tests/judge_server.py's
ChatServer: blueprints whose transcripts name their audio file, a reader of the two blueprints in a
blueprint-mode prompt, and a responder that answers each pair with its human label in one of several
reply styles (JSON, words, Markdown) so the parser is exercised end to end."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from judge_data import blueprint
from judge_server import Reply, completion

_R1, _R2, _END = "Response 1 blueprint:\n", "\n\nResponse 2 blueprint:\n", "\n\nReply with only"


def hcot_blueprints(paths: Sequence[str]) -> dict[str, dict]:
    """A flat blueprint per audio path, its transcript naming the file (the responder's key); the
    emotion and accent scores are set so that every feature group has values."""
    out = {}
    for k, path in enumerate(dict.fromkeys(paths)):
        bp = blueprint(f"answer in {path}", ovrl=2.0 + (k % 20) / 10, pitch=100.0 + k % 150)
        bp["emotion"] = {"happy": 0.25, "neutral": 0.75}
        bp["accent"] = {"us": 0.9, "uk": 0.1}
        out[path] = bp
    return out


def blueprint_builder(blueprints: Mapping[str, dict]) -> type:
    """A BlueprintBuilder stand-in (sdscore.features.blueprint) that looks paths, or their file names,
    up in blueprints."""

    class BlueprintBuilder:
        def __init__(self, cache_dir=None, **options):
            pass

        def build(self, paths):
            return [blueprints.get(p) or blueprints.get(Path(p).name) or {"error": f"no blueprint for {Path(p).name}"}
                    for p in paths]

        def close(self):
            pass

    return BlueprintBuilder


def split_blueprint_prompt(user: str) -> tuple[str, dict, dict]:
    """(the prompt with both blueprint JSONs cut out, blueprint 1, blueprint 2) of a bundled
    blueprint-mode user prompt; AssertionError when the prompt is not laid out that way."""
    start = user.index(_R1) + len(_R1)
    middle = user.index(_R2, start)
    end = user.index(_END, middle)
    first, second = json.loads(user[start:middle]), json.loads(user[middle + len(_R2) : end])
    return user[:start] + "<1>" + user[middle : middle + len(_R2)] + "<2>" + user[end:], first, second


#: reply styles for a label; {w} is "1", "2" or "tie" as a word the parser must read
STYLES = (
    lambda w: json.dumps({"reasoning": "compared both", "label": w}),
    lambda w: "```json\n" + json.dumps({"label": w, "reasoning": "fenced"}) + "\n```",
    lambda w: f"**Response {w}** - it follows the requested delivery." if w != "tie" else "**Tie** - equally weak.",
    lambda w: f"After comparing both answers: Verdict: {w if w != 'tie' else 'TIE'}.",
    lambda w: f"Audio {w} is clearly better." if w != "tie" else "They are equally good.",
)


class HumanLabelResponder:
    """Answers a blueprint-mode prompt with the overall label of its pair (keyed by the two
    transcripts), in STYLES[i % len(STYLES)] for the i-th request; records the prompts it saw."""

    def __init__(self, labels: Mapping[tuple[str, str], str], garbage: Sequence[str] = ()):
        self.labels = dict(labels)
        self.garbage = set(garbage)  # response-1 transcripts answered with an unparseable reply
        self.prompts: list[str] = []

    def __call__(self, index: int, body: dict, headers: dict) -> Reply:
        user = body["messages"][1]["content"]
        self.prompts.append(user)
        _, first, second = split_blueprint_prompt(user)
        key = (first["agent_response"], second["agent_response"])
        if key[0] in self.garbage:
            return completion("I would rather not pick one of these two; " + "both have merits. " * 20)
        return completion(STYLES[index % len(STYLES)](self.labels[key]))
