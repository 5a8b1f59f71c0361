"""Reply parsers of the audio-judge layer: at least 20 reply variants per answer type, malformed ones included."""

from __future__ import annotations

import pytest

from sdscore.llm_judges.answers import option_letters, parse_choice, parse_ranking, parse_turns, parse_yes_no
from sdscore.llm_judges.reply_error import ReplyError

YES_NO = [
    ("YES", True), ("NO", False), ("yes", True), ("no", False), ("Yes.", True), ("No.", False),
    ("**YES**", True), ("`NO`", False), ("Answer: YES", True), ("Final answer: no", False),
    ("  yes\n", True), ('"No"', False), ("YES — the voices match.", True),
    ("No, turn 3 sounds like another person.", False), ("Yes, all turns are the same speaker.", True),
    ("I think the answer is yes.", True), ("The voice is not consistent, so: NO", False),
    ("## Verdict: YES", True), ("Response - no", False), ("[YES]", True), ("«Yes»", True),
    ("No; yes would be wrong here", False),  # the first word decides
]
YES_NO_BAD = [
    "", "Maybe", "I cannot tell.", "It is unclear whether yes or no.", "Y", "N/A", "consistent",
    "Both yes and no apply",
]


@pytest.mark.parametrize(("reply", "expected"), YES_NO)
def test_yes_no_variants(reply, expected):
    assert parse_yes_no(reply) is expected


@pytest.mark.parametrize("reply", YES_NO_BAD)
def test_yes_no_refused_with_raw_text(reply):
    with pytest.raises(ReplyError, match=r"a YES/NO answer was asked, the reply has (neither|both)") as info:
        parse_yes_no(reply)
    assert info.value.raw == reply


TURNS = [
    ("Turn 3, Turn 5", [2, 4]), ("None", []), ("none", []), ("None.", []), ("**None**", []),
    ("Turn 2", [1]), ("turn 2", [1]), ("Turns 2 and 4", [1, 3]), ("Turns 1, 2, and 3", [0, 1, 2]),
    ("3, 5", [2, 4]), ("3", [2]), ("**Turn 4**", [3]), ("Answer: Turn 1, Turn 5", [0, 4]),
    ("The inconsistent turn is Turn 4.", [3]), ("Turn 2 sounds different from the reference.", [1]),
    ("Turn #3", [2]), ("turn 5; turn 1", [0, 4]), ("Turn 3, Turn 3", [2]), ("None of the turns", []),
    ("All turns are consistent.", []), ("No turns are inconsistent.", []), ("Turn 2 or turn 4", [1, 3]),
    ("`Turn 1`, `Turn 2`", [0, 1]),
]
TURNS_BAD = [
    ("I am not sure", "the reply has neither"),
    ("", "the reply has neither"),
    ("Turn 7", "the reply names turn 7, outside 1..5"),
    ("Turn 0", "the reply names turn 0, outside 1..5"),
    ("None, but maybe turn 3", "names turns and also says none"),
    ("Several of them", "the reply has neither"),
    ("The second one", "the reply has neither"),
]


@pytest.mark.parametrize(("reply", "expected"), TURNS)
def test_turn_list_variants(reply, expected):
    assert parse_turns(reply, 5) == expected


@pytest.mark.parametrize(("reply", "message"), TURNS_BAD)
def test_turn_list_refused_with_raw_text(reply, message):
    with pytest.raises(ReplyError, match=message) as info:
        parse_turns(reply, 5)
    assert info.value.raw == reply


CHOICES = [
    ("A", "A"), ("B", "B"), ("C", "C"), ("b", "B"), ("c.", "C"), ("(a)", "A"), ("B)", "B"),
    ("**C**", "C"), ("Option A", "A"), ("option b", "B"), ("Option (C)", "C"), ("Answer: B", "B"),
    ("The answer is C.", "C"), ("B - it matches the rest best.", "B"), ("A. The first clip.", "A"),
    ("I choose Option C because its timbre matches.", "C"), ("`A`", "A"), ("  C\n", "C"),
    ("Final answer: option A", "A"), ("A close match is Option B", "B"), ("Choice: (b)", "B"),
]
CHOICES_BAD = [
    ("", "no option letter"), ("D", "no option letter"), ("None of them", "no option letter"),
    ("A or B", "several options"), ("Option A and Option C", "several options"),
    ("A > B > C", "a ranking"), ("A close call, but C", "several options"),
]


@pytest.mark.parametrize(("reply", "expected"), CHOICES)
def test_choice_variants(reply, expected):
    assert parse_choice(reply, ("A", "B", "C")) == expected


@pytest.mark.parametrize(("reply", "message"), CHOICES_BAD)
def test_choice_refused_with_raw_text(reply, message):
    with pytest.raises(ReplyError, match=message) as info:
        parse_choice(reply, ("A", "B", "C"))
    assert info.value.raw == reply


RANKINGS = [
    ("A > B > C", ["A", "B", "C"]), ("C>B>A", ["C", "B", "A"]), ("b > a > c", ["B", "A", "C"]),
    ("**C > A > B**", ["C", "A", "B"]), ("Ranking: B, C, A", ["B", "C", "A"]),
    ("1. B\n2. A\n3. C", ["B", "A", "C"]), ("1) C\n2) B\n3) A", ["C", "B", "A"]),
    ("B ≻ C ≻ A", ["B", "C", "A"]), ("A → C → B", ["A", "C", "B"]), ("A -> B -> C", ["A", "B", "C"]),
    ("Option C > Option A > Option B", ["C", "A", "B"]), ("I rank them C then A then B.", ["C", "A", "B"]),
    ("`B > A > C`", ["B", "A", "C"]), ("Answer: (A) > (C) > (B)", ["A", "C", "B"]),
    ("From most to least consistent: B > C > A. B is closest.", ["B", "C", "A"]),
    ("A>>B>>C", ["A", "B", "C"]), ("C; B; A", ["C", "B", "A"]), ("  a > c > b  ", ["A", "C", "B"]),
    ("Ranking - B > A > C", ["B", "A", "C"]), ("B, A, C", ["B", "A", "C"]),
    ("**Final answer:** C > B > A", ["C", "B", "A"]),
]
RANKINGS_BAD = [
    ("A > B", "has A > B:"), ("A > A > C", "has A > A > C:"), ("", "has no ranking"),
    ("B", "has no ranking"), ("A > B > D", "has A > B:"), ("I cannot rank these.", "has no ranking"),
    ("A > B > C > A", "has A > B > C > A:"),
]


@pytest.mark.parametrize(("reply", "expected"), RANKINGS)
def test_ranking_variants(reply, expected):
    assert parse_ranking(reply, ("A", "B", "C")) == expected


@pytest.mark.parametrize(("reply", "message"), RANKINGS_BAD)
def test_ranking_refused_with_raw_text(reply, message):
    with pytest.raises(ReplyError, match=message) as info:
        parse_ranking(reply, ("A", "B", "C"))
    assert info.value.raw == reply


def test_four_options_and_letters():
    letters = option_letters(4)
    assert letters == ("A", "B", "C", "D")
    assert parse_ranking("D > B > A > C", letters) == ["D", "B", "A", "C"]
    assert parse_choice("Option D", letters) == "D"
    with pytest.raises(ValueError, match="the number of options must be an integer in 1..26, got 27"):
        option_letters(27)


def test_non_text_reply_and_bad_arguments():
    with pytest.raises(ReplyError, match="reply content is dict, expected text"):
        parse_yes_no({"answer": "yes"})
    with pytest.raises(ValueError, match="n_turns must be an integer >= 1, got 0"):
        parse_turns("Turn 1", 0)
    with pytest.raises(ValueError, match="letters must be distinct upper-case letters"):
        parse_choice("A", ("A", "A"))

