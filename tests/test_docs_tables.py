"""The docs stay true to the code: docs/'s generated tables (manifest schemas from the registry's specs,
options from the CLI's parser) equal a fresh render, README.md stays short, and every relative link in
README.md and docs/ points at a file and heading that exist."""

from __future__ import annotations

import re
import shutil
import unicodedata
from pathlib import Path

import pytest

from sdscore import docs_tables
from sdscore.docs_tables import DocsTablesError, check, find_blocks, main, missing_blocks, render, write
from sdscore.protocols import registry
from sdscore.protocols.registry import PROTOCOLS, ProtocolEntry
from test_protocol_registry import TOY  # the toy sixth protocol's entry (tests/toy_protocol)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REGENERATE = ".venv/bin/python -m sdscore.docs_tables --write"


@pytest.fixture
def toy():
    registry.register(TOY)
    try:
        yield TOY
    finally:
        registry.unregister("toy")


def test_the_generated_tables_in_docs_are_current():
    problems = check(DOCS)
    assert not problems, ("docs/ is out of date with the code:\n  " + "\n  ".join(problems)
                          + f"\nregenerate with (from the repository root): {REGENERATE}")


def test_the_docs_folder_the_module_finds_is_the_checkouts():
    assert docs_tables.default_docs_folder() == DOCS


def test_every_protocol_page_has_its_manifest_and_options_blocks():
    labels = {(b.kind, b.name) for page in DOCS.glob("*.md") for b in find_blocks(page.read_text(), page)}
    for name, entry in PROTOCOLS.items():
        assert ("manifest", name) in labels and ("eval-options", name) in labels
        assert ("options", name) in labels or not entry.scores
    assert ("runtime-options", None) in labels


def test_tables_come_from_the_spec_and_the_parser():
    reward = render("manifest", "reward")
    spec = PROTOCOLS["reward"].manifest_spec()
    for column in spec.schema:
        assert f"| `{column}` |" in reward
    assert "| `pair_id` | text | yes | id (filled from the row number when absent); unique key |" in reward
    assert "`modality`, `colloquialness`" in reward
    judge = render("manifest", "judge")
    assert "unique key (dataset + item_id)" in judge and "audio path(s)" in judge
    options = render("options", "consistency")
    assert "| `--embedder` | `ge2e` \\| `ecapa` \\| `wavlm` | `ge2e` |" in options
    assert "--workers" not in options and "--resume" not in options  # the runtime's are on their own
    runtime = render("runtime-options")
    assert "| `--workers` |" in runtime and "| `--resume` |" in runtime and "--embedder" not in runtime
    assert "| `--out` (required) |" in render("eval-options", "arena")


def test_an_option_added_to_the_parser_makes_its_block_stale_and_write_renews_it(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    write(docs)  # current with the code, whatever the state of docs/ (test_..._are_current checks that)
    options = PROTOCOLS["reward"].options()
    original = options.add_score_options

    def with_one_more(parser):
        original(parser)
        parser.add_argument("--brand-new", type=int, default=3, help="a new option | with a pipe")

    monkeypatch.setattr(options, "add_score_options", with_one_more)
    problems = check(docs)
    assert len(problems) == 1 and re.fullmatch(r".*reward\.md:\d+: generated block 'options reward' is stale",
                                               problems[0])
    assert write(docs) == [docs / "reward.md"]
    assert check(docs) == []
    assert "| `--brand-new` | `BRAND_NEW` | `3` | a new option \\| with a pipe |" in (docs / "reward.md").read_text()


def test_check_names_the_stale_block_and_the_command_and_write_fixes_it(tmp_path, capsys):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    write(docs)  # current with the code, whatever the state of docs/ (test_..._are_current checks that)
    page = docs / "judge.md"
    text = page.read_text()
    page.write_text(text.replace("| `item_id` |", "| `an_old_name` |", 1))
    line = next(b.line for b in find_blocks(text, page) if b.label == "manifest judge")
    assert main(["--check", "--docs", str(docs)]) == 1
    err = capsys.readouterr().err
    assert f"{page}:{line}: generated block 'manifest judge' is stale" in err
    assert "regenerate with: python -m sdscore.docs_tables --write" in err
    assert main(["--write", "--docs", str(docs)]) == 0
    assert page.read_text() == text
    assert main(["--check", "--docs", str(docs)]) == 0
    assert f"rewrote {page}" in capsys.readouterr().out


def test_text_outside_the_blocks_is_kept(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n\nbefore\n<!-- generated: eval-options reward -->\nstale text\n<!-- end generated -->\nafter\n")
    write(tmp_path)
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n<!-- generated: eval-options reward -->\n| option |")
    assert text.endswith("\n<!-- end generated -->\nafter\n") and "stale text" not in text


def test_a_sixth_protocol_needs_its_page_and_gets_its_tables(toy, tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    write(docs)  # current with the code, whatever the state of docs/ (test_..._are_current checks that)
    assert check(docs) == [f"{docs / 'toy.md'}: no '<!-- generated: {kind} toy -->' block"
                           for kind in ("manifest", "options", "eval-options")]
    (docs / "toy.md").write_text("# Toy\n\n" + "\n\n".join(
        f"<!-- generated: {kind} toy -->\n<!-- end generated -->" for kind in ("manifest", "options", "eval-options")))
    write(docs)
    assert check(docs) == []
    text = (docs / "toy.md").read_text()
    assert "| `clip_id` | text | yes | id (filled from the row number when absent); unique key |" in text
    assert "| `mood` | text |  |  | `calm`, `loud` |" in text
    assert "| `audio_path` | text |  | audio path(s), relative to the manifest |" in text
    assert "Row checks beyond the columns' types, required columns and allowed values: The spec's own rule" in text
    assert "| `--weight` | `WEIGHT` | `1.0` | score = word count × weight |" in text


def test_missing_runtime_block_is_named(tmp_path):
    assert missing_blocks(tmp_path, {})[-1] == f"{tmp_path / 'runtime.md'}: no '<!-- generated: runtime-options -->' block"


@pytest.mark.parametrize(("kind", "name", "message"), [
    ("schema", "reward", "unknown generated block kind 'schema'; expected one of manifest, options"),
    ("manifest", None, "a 'manifest' block needs a protocol name"),
    ("options", "nope", "unknown protocol 'nope'; expected one of reward"),
    ("runtime-options", "reward", "a 'runtime-options' block takes no protocol name, got 'reward'"),
])
def test_a_block_that_cannot_be_rendered_is_refused(kind, name, message):
    with pytest.raises(DocsTablesError, match=re.escape(message)):
        render(kind, name)


def test_options_of_a_protocol_without_a_scoring_pass_are_refused(monkeypatch):
    monkeypatch.setitem(PROTOCOLS, "reward", ProtocolEntry("reward", "no scoring", "sdscore.protocols.reward",
                                                           scores=False, spec=PROTOCOLS["reward"].spec))
    with pytest.raises(DocsTablesError, match="protocol 'reward' has no scoring pass"):
        render("options", "reward")


def test_a_missing_subcommand_is_named(monkeypatch):
    with pytest.raises(DocsTablesError, match=r"`sdscore score nope` does not exist \(no 'nope' among reward"):
        docs_tables._subparser(docs_tables._cli(), "score", "nope")


def test_malformed_markers_are_errors_naming_file_and_line(tmp_path, capsys):
    page = tmp_path / "bad.md"
    page.write_text("# x\n\n<!-- generated: manifest reward -->\nno end\n")
    with pytest.raises(DocsTablesError, match=re.escape(f"{page}:3: '<!-- generated: manifest reward -->' has no "
                                                        "'<!-- end generated -->' after it")):
        check(tmp_path)
    assert main(["--check", "--docs", str(tmp_path)]) == 2
    assert f"error: {page}:3:" in capsys.readouterr().err
    page.write_text("<!-- generated: manifest reward -->\n<!-- generated: options reward -->\n"
                    "<!-- end generated -->\n<!-- end generated -->\n")
    with pytest.raises(DocsTablesError, match=re.escape(f"{page}:2: a generated block starts inside the block of line 1")):
        write(tmp_path)


def test_a_docs_folder_that_is_not_there_is_refused(tmp_path, capsys):
    with pytest.raises(DocsTablesError, match="not a folder of docs pages"):
        check(tmp_path / "absent")
    assert main(["--write", "--docs", str(tmp_path / "absent")]) == 2
    assert "not a folder of docs pages (pass --docs DIR)" in capsys.readouterr().err


# ------------------------------------------------------------------------------- README and links

def test_the_readme_is_at_most_250_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move detail into docs/ (limit 250)"


def github_anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, markup and punctuation dropped (letters, digits, '-', '_'
    and spaces kept), spaces → '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"^#{1,6} (.*)", line)
        if match:
            base = github_anchor(match.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def test_github_anchor_matches_githubs_rule():
    assert github_anchor("The GPU run (prepared, not yet run: no device has been lent)") == \
        "the-gpu-run-prepared-not-yet-run-no-device-has-been-lent"
    assert github_anchor("Options of every `sdscore score`") == "options-of-every-sdscore-score"
    assert github_anchor("Reward: zero-shot audio-LLM baselines") == "reward-zero-shot-audio-llm-baselines"
    assert github_anchor("Original labels and feature ablation (TRACE Tab. 1 and Tab. 12)") == \
        "original-labels-and-feature-ablation-trace-tab-1-and-tab-12"


def _links(path: Path) -> list[tuple[int, str]]:
    found, fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        if not fence:
            found += [(number, target) for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line))]
    return found


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 10
    broken, checked = [], 0
    for page in pages:
        for number, target in _links(page):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto: — not checked here
                continue
            file, _, anchor = target.partition("#")
            destination = (page.parent / file).resolve() if file else page
            checked += 1
            if not destination.exists():
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target}: no file {destination}")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target}: no heading '#{anchor}' in {file or page.name}")
    assert checked > 40
    assert not broken, "\n".join(broken)
