"""Judge reply validation: tolerant of fences and whitespace, strict on labels."""

from __future__ import annotations

import json

import pytest

from sdscore.errors import JudgeError
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.judge.replies import parse_reply

GOOD = {"reasoning": "r", "content": "1", "voice_quality": "both_good", "paralinguistics": "both_bad"}
EXPECTED = {"content": "1", "voice_quality": "both_good", "paralinguistics": "both_bad", "reasoning": "r"}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(GOOD),
        "\n  " + json.dumps(GOOD, indent=2) + "  \n",
        "```json\n" + json.dumps(GOOD) + "\n```",
        "```\n" + json.dumps(GOOD) + "```",
        "  ```JSON \n" + json.dumps(GOOD, indent=1) + "\n```\n",
    ],
)
def test_valid_replies_parse_with_fences_and_whitespace(text):
    assert parse_reply(text) == EXPECTED


def test_label_whitespace_and_integer_winners_are_read():
    reply = {**GOOD, "content": 2, "voice_quality": " 1 "}
    assert parse_reply(json.dumps(reply))["content"] == "2"
    assert parse_reply(json.dumps(reply))["voice_quality"] == "1"


def test_authors_key_names_are_accepted():
    authors = {"reasoning": "r", "content": "2", "voice_quality": "1", "instruction_following_audio": "both_good"}
    assert parse_reply(json.dumps(authors))["paralinguistics"] == "both_good"
    listing2 = {
        "prediction_content": "1",
        "prediction_vq": "both_good",
        "prediction_para": "2",
        "reasoning": {"content": "a", "vq": "b", "para": "c"},
    }
    parsed = parse_reply(json.dumps(listing2))
    assert (parsed["content"], parsed["voice_quality"], parsed["paralinguistics"]) == ("1", "both_good", "2")
    assert json.loads(parsed["reasoning"]) == {"content": "a", "para": "c", "vq": "b"}


def test_missing_reasoning_is_empty():
    reply = {k: v for k, v in GOOD.items() if k != "reasoning"}
    assert parse_reply(json.dumps(reply))["reasoning"] == ""


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json at all", "not valid JSON"),
        ('{"content": "1", ', "not valid JSON"),
        ("Here you go: " + json.dumps(GOOD), "not valid JSON"),
        ("[1, 2]", "JSON list, expected an object"),
        (json.dumps({**GOOD, "content": "tie"}), "content label 'tie' is not one of"),
        (json.dumps({**GOOD, "voice_quality": "Both_Good"}), "voice_quality label 'Both_Good'"),
        (json.dumps({**GOOD, "voice_quality": "both good"}), "voice_quality label 'both good'"),
        (json.dumps({**GOOD, "paralinguistics": "A"}), "paralinguistics label 'A'"),
        (json.dumps({**GOOD, "content": 3}), "content label 3"),
        (json.dumps({**GOOD, "content": None}), "content label None"),
        (json.dumps({**GOOD, "content": True}), "content label True"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "voice_quality"}), "no 'voice_quality' label"),
        (json.dumps({**GOOD, "instruction_following_audio": "1"}), "conflicting labels"),
    ],
)
def test_bad_replies_raise_reply_error(text, match):
    with pytest.raises(ReplyError, match=match):
        parse_reply(text)


def test_reply_error_is_a_judge_error_and_shows_a_short_excerpt():
    with pytest.raises(JudgeError, match=r"…") as info:
        parse_reply("x" * 1000)
    assert len(str(info.value)) < 400


def test_non_text_content_is_refused():
    with pytest.raises(ReplyError, match="reply content is dict, expected text"):
        parse_reply({"content": "1"})
