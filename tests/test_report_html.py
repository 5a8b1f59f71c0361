"""The HTML report: built from real evaluations of the tiny synthetic corpus, then checked without a
browser (no external URL, hostile text escaped, audio budget) and in headless Debian Chromium with
the network cut off (no console errors, every metric cell equal to METRICS.json, sorting, players).

Reward and consistency are scored on the runtime; judge and naturalness results are written here
(a judge's and a system's rows as their scorers write them) so the test stays fast; arena reads the
battles manifest. Screenshots go to $SDSCORE_REPORT_ARTEFACTS when set, else to the test's tmp folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from sdscore.cli import main
from sdscore.manifests import read_manifest
from sdscore.report.html import AudioEmbedder, render_report
from sdscore.report.html.elements import format_value, lookup
from sdscore.report_document import protocol_section

CHROMIUM = "/usr/bin/chromium"
#: Text that would run script if any data reached the page unescaped.
HOSTILE = "</script><script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"
HOSTILE_FILE = "<img src=x onerror=window.__pwned=3>.wav"
LABELS = ("1", "2", "both_good", "both_bad")
PROTOCOLS = ("reward", "consistency", "judge", "naturalness", "arena")


def _break_first_chosen_turn(corpus: Path, out: Path) -> Path:
    """The reward manifest with pair 0's last chosen turn pointing at a missing file with a hostile name."""
    frame = read_manifest(corpus / "reward_pairs.parquet", "reward")
    rows = frame.to_dicts()
    rows[0]["chosen"][-1]["audio_path"] = str(out / HOSTILE_FILE)
    path = out / "reward_pairs.parquet"
    pl.DataFrame(rows, schema=frame.schema).write_parquet(path)
    return path


def _judge_results(corpus: Path, out: Path) -> list[Path]:
    """Two judges' results over the tiny judge items: one mostly right (one row failed, with a hostile
    error), one always off by a label; priced as an API judge would be."""
    items = read_manifest(corpus / "judge_items.parquet", "judge")
    paths = []
    for name, shift in (("judge-a", 0), ("judge-b", 1)):
        rows = []
        for i, item in enumerate(items.iter_rows(named=True)):
            row = {"item_id": item["item_id"], "reasoning": "r", "cost": 0.0125, "error": None}
            for dim in ("content", "voice_quality", "paralinguistics", "overall"):
                k = (LABELS.index(item[dim]) + shift + (i % 3 == 2 and shift == 0)) % len(LABELS)
                row[f"{dim}_pred"], row[dim] = LABELS[k], item[dim]
            if name == "judge-a" and i == 1:
                row |= {f"{d}_pred": None for d in ("content", "voice_quality", "paralinguistics", "overall")}
                row |= {"error": f"reply did not parse: {HOSTILE}", "cost": None}
            rows.append(row)
        path = out / f"{name}.parquet"
        pl.DataFrame(rows).write_parquet(path)
        paths.append(path)
    return paths


def _naturalness_results(corpus: Path, out: Path) -> Path:
    """A naturalness results table for two systems over the tiny items (timing and MOS columns only)."""
    items = read_manifest(corpus / "naturalness.parquet", "naturalness")
    rows = []
    for system, offset in (("human", 0.0), ("robot", 0.4)):
        for i, item in enumerate(items.iter_rows(named=True)):
            start = item["answer_start_time"] + offset
            rows.append({
                "item_id": item["item_id"], "system": system, "question_key": item["audio_path"],
                "asker": "a", "answer_start_time": start, "latency_ms": 1000 * max(start, 0.1) + 37 * i,
                "interrupted": start < 0, "interrupted_ms": -1000 * start if start < 0 else 0.0,
                "mos_dnsmos_ovrl": 2.5 + 0.1 * i - offset, "mos_p808": 3.0 + 0.05 * i,
                "answer_duration_s": item["answer_duration"],
                "error": "answer audio: NaN samples" if (system, i) == ("robot", 2) else None,
            })
    path = out / "naturalness.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def reports(tiny_corpus, tmp_path_factory, tiny_feature_cache) -> dict[str, tuple[Path, Path]]:
    """protocol → (report.html, METRICS.json), each made through the CLI."""
    out = tmp_path_factory.mktemp("reports")
    corpus = tiny_corpus
    built = {}
    # reward: score on the runtime (one pair fails), then eval with --report
    manifest = _break_first_chosen_turn(corpus, out)
    assert main(["score", "reward", str(manifest), "--out", str(out / "reward.parquet")]) == 1
    assert main(["eval", "reward", str(out / "reward.parquet"), "--out", str(out / "reward.json"),
                 "--report", str(out / "reward.html")]) == 0
    built["reward"] = (out / "reward.html", out / "reward.json")
    # consistency: score, eval, then `sdscore report` from the files
    assert main(["score", "consistency", str(corpus / "consistency.parquet"), "--out", str(out / "cons.parquet"),
                 "--threshold", "0.7", "--cache-dir", str(tiny_feature_cache)]) == 0
    assert main(["eval", "consistency", str(out / "cons.parquet"), "--out", str(out / "cons.json")]) == 0
    assert main(["report", "--protocol", "consistency", str(out / "cons.parquet"), "--metrics",
                 str(out / "cons.json"), "--out", str(out / "consistency.html")]) == 0
    built["consistency"] = (out / "consistency.html", out / "cons.json")
    # judge and naturalness: results without provenance, so the manifest is named for the audio
    judges = [str(p) for p in _judge_results(corpus, out)]
    assert main(["eval", "judge", *judges, "--out", str(out / "judge.json")]) == 0
    assert main(["report", "--protocol", "judge", *judges, "--metrics", str(out / "judge.json"),
                 "--manifest", str(corpus / "judge_items.parquet"), "--out", str(out / "judge.html")]) == 0
    built["judge"] = (out / "judge.html", out / "judge.json")
    natural = str(_naturalness_results(corpus, out))
    assert main(["eval", "naturalness", natural, "--out", str(out / "nat.json")]) == 0
    assert main(["report", "--protocol", "naturalness", natural, "--metrics", str(out / "nat.json"),
                 "--manifest", str(corpus / "naturalness.parquet"), "--out", str(out / "naturalness.html")]) == 0
    built["naturalness"] = (out / "naturalness.html", out / "nat.json")
    # arena: eval of the battles manifest with --report
    assert main(["eval", "arena", str(corpus / "battles.parquet"), "--out", str(out / "arena.json"),
                 "--report", str(out / "arena.html")]) == 0
    built["arena"] = (out / "arena.html", out / "arena.json")
    built["demo"] = (_demo_folder_report(corpus, out), None)
    return built


def _demo_folder_report(corpus: Path, out: Path) -> Path:
    """The files above laid out as `sdscore demo` writes them, one stage marked failed, then the demo's
    report of the folder (write_demo_report works on an existing demo folder)."""
    from sdscore.demo import demo_stages, write_demo_report

    demo = out / "demo"
    sources = {"reward": (["reward.parquet"], "reward.json"), "consistency": (["cons.parquet"], "cons.json"),
               "judge": (["judge-a.parquet", "judge-b.parquet"], "judge.json"),
               "naturalness": (["naturalness.parquet", "naturalness.parquet"], "nat.json"),
               "arena": ([str(corpus / "battles.parquet")], "arena.json")}
    for protocol, (results, metrics) in ((name, stage.REPORT_INPUTS) for name, stage in demo_stages().items()):
        # the results files this test has (naturalness's demo also writes stance results: none here)
        for source, target in [*zip(sources[protocol][0], results), (sources[protocol][1], metrics)]:
            (demo / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / source, demo / target)
    stages = [{"protocol": p, "title": f"{p} stage", "headline": {}} for p in demo_stages()]
    summary = {"stages": stages, "failed_stages": {"extra": f"RuntimeError: {HOSTILE}"}}
    (demo / "demo.json").write_text(json.dumps(summary))
    return write_demo_report(demo)


# --- without a browser -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROTOCOLS)
def test_report_loads_nothing_from_outside(reports, name):
    html = reports[name][0].read_text(encoding="utf-8")
    assert not re.search(r"https?://", html, re.IGNORECASE)  # no URL of any kind, not even in text
    for attribute, value in re.findall(r"""\b(src|href)\s*=\s*["']([^"']*)["']""", html):
        assert value.startswith(("data:", "file:", "#")), (attribute, value[:80])
    assert html.count("<script") == 1 and html.count("</script>") == 1  # only our own sortable-table script
    assert "<link" not in html and "@import" not in html


def test_hostile_text_is_escaped(reports):
    judge = reports["judge"][0].read_text(encoding="utf-8")
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;" in judge
    assert "<img" not in judge.replace('<img src="data:image/png', "")
    reward = reports["reward"][0].read_text(encoding="utf-8")
    assert "&lt;img src=x onerror=window.__pwned=3&gt;.wav" in reward  # the missing file's name, as text
    assert "<img src=x" not in reward


def test_item_ids_and_paths_are_escaped_in_attributes(tmp_path):
    metrics = {"n_battles": 1, "elo": {}, "bradley_terry": {'"><b>x</b>': {"rating": 1000.0, "ci95": [990.0, 1010.0]}},
               "win_rate": {}, "position_bias": {}, "length_bias": None, "elo_by_domain": None}
    battles = tmp_path / "battles.parquet"
    pl.DataFrame({"battle_id": ['b"><i>1'], "model_a": ['"><b>x</b>'], "model_b": ["y"],
                  "winner": ["model_b"]}).write_parquet(battles)
    html = render_report([protocol_section("arena", metrics, [battles])], title="<t>")
    assert "<b>x</b>" not in html and "<i>1" not in html and "<t>" not in html
    assert 'data-path="[&#34;bradley_terry&#34;, &#34;\\&#34;&gt;&lt;b&gt;x&lt;/b&gt;&#34;, &#34;rating&#34;]"' in html


def test_audio_budget_links_clips_past_the_limits(tiny_corpus):
    clip = next(p for p in sorted((tiny_corpus / "audio").rglob("*.wav")))
    linked = AudioEmbedder(clip_limit=0).clip("answer", str(clip))
    assert not linked.embedded and linked.src == clip.resolve().as_uri()
    embedder = AudioEmbedder(clip_limit=10 << 20, report_limit=10 << 20)
    first = embedder.clip("answer", str(clip))
    assert first.embedded and first.src.startswith("data:audio/wav;base64,")
    assert embedder.embedded_bytes == len(first.src) - len("data:audio/wav;base64,")
    tight = AudioEmbedder(clip_limit=10 << 20, report_limit=embedder.embedded_bytes + 10)
    assert tight.clip("a", str(clip)).embedded and not tight.clip("b", str(clip)).embedded  # the total is spent
    assert AudioEmbedder().clip("x", str(clip.parent / "gone.wav")).missing.endswith("no such file")
    with pytest.raises(ValueError, match="audio limits must be >= 0 bytes"):
        AudioEmbedder(clip_limit=-1)


def test_numbers_are_formatted_as_stated():
    assert format_value(0.8125) == "0.812" and format_value(0.8125, 4) == "0.8125"
    assert format_value(None) == "—" and format_value(True) == "yes" and format_value(72) == "72"
    assert lookup({"a": [{"b": 1.5}]}, ("a", 0, "b")) == 1.5
    with pytest.raises(KeyError, match="METRICS.json has no a.1"):
        lookup({"a": [1]}, ("a", 1))


def _err(capsys) -> str:
    return "".join(capsys.readouterr().err.split())


def test_report_command_errors_name_the_problem(tmp_path, tiny_corpus, capsys):
    (tmp_path / "bad.json").write_text("[1, 2]")
    battles = str(tiny_corpus / "battles.parquet")
    code = main(["report", "--protocol", "arena", battles, "--metrics", str(tmp_path / "bad.json"),
                 "--out", str(tmp_path / "r.html")])
    assert code == 2 and "bad.json:metricsJSONmustbeanobject,gotlist" in _err(capsys)
    code = main(["report", "--protocol", "arena", battles, "--metrics", str(tmp_path / "none.json"),
                 "--out", str(tmp_path / "r.html")])
    assert code == 2 and "none.json:cannotreadmetricsJSON" in _err(capsys)
    (tmp_path / "empty.json").write_text("{}")
    code = main(["report", "--protocol", "reward", str(tmp_path / "gone.parquet"), "--metrics",
                 str(tmp_path / "empty.json"), "--out", str(tmp_path / "r.html")])
    assert code == 2 and "gone.parquet:nosuchresultsfile" in _err(capsys)
    with pytest.raises(SystemExit):
        main(["report", "--protocol", "arena", battles, "--metrics", "m.json", "--out", "r.html",
              "--audio-clip-mb", "-1"])
    assert not (tmp_path / "r.html").exists()


def test_another_protocols_metrics_or_deep_nesting_is_one_clear_error(reports, tiny_corpus, tmp_path, capsys):
    """Every protocol's results with every other protocol's METRICS.json: rc 2 and one line naming the
    file (it was a KeyError traceback), and JSON nested past what eval writes (a RecursionError)."""
    folder = reports["reward"][1].parent
    results = {"reward": [folder / "reward.parquet"], "consistency": [folder / "cons.parquet"],
               "judge": [folder / "judge-a.parquet", folder / "judge-b.parquet"],
               "naturalness": [folder / "naturalness.parquet"], "arena": [tiny_corpus / "battles.parquet"]}
    for protocol, files in results.items():
        for other, (_html, metrics) in reports.items():
            if other in (protocol, "demo"):
                continue
            code = main(["report", "--protocol", protocol, *map(str, files), "--metrics", str(metrics),
                         "--manifest", str(tiny_corpus / "judge_items.parquet" if protocol == "judge" else
                                           tiny_corpus / "naturalness.parquet" if protocol == "naturalness" else
                                           tiny_corpus / "consistency.parquet"),
                         "--out", str(tmp_path / "r.html")])
            err = capsys.readouterr().err
            assert code == 2 and "Traceback" not in err, (protocol, other, err)
            assert f"{metrics.name}:" in _err(capsys) + "".join(err.split()), (protocol, other, err)
    for depth in (100, 100_000):
        deep = tmp_path / f"deep{depth}.json"
        deep.write_text('{"n_rows": 1, "x": ' + "[" * depth + "]" * depth + "}")
        code = main(["report", "--protocol", "consistency", str(results["consistency"][0]), "--metrics", str(deep),
                     "--out", str(tmp_path / "r.html")])
        assert code == 2 and f"deep{depth}.json:" in (err := _err(capsys)) and "nested" in err
    assert not (tmp_path / "r.html").exists()


def test_a_missing_manifest_is_said_not_fatal(reports, tmp_path):
    results = reports["consistency"][1].with_name("cons.parquet")
    metrics = json.loads(reports["consistency"][1].read_text())
    section = protocol_section("consistency", metrics, [results], manifest=tmp_path / "moved.parquet")
    notes = [block.note for block in section.blocks if getattr(block, "kind", "") == "items"]
    assert any("moved.parquet is not there any more" in note for note in notes)


# --- in the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"Debian chromium is not installed at {CHROMIUM} (apt-get install chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        except sync_api.Error:  # e.g. running as root in a container: no sandbox there
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _artefacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SDSCORE_REPORT_ARTEFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _check_text(text: str, value) -> None:
    """The cell's text shows value rounded to the decimals it shows."""
    if value is None:
        assert text == "—"
    elif isinstance(value, bool):
        assert text == ("yes" if value else "no")
    elif isinstance(value, (int, float)):
        digits = len(text.split(".")[1]) if "." in text else 0
        assert math.isclose(float(text), value, abs_tol=0.5 * 10**-digits + 1e-12), (text, value)
        assert text == f"{value:.{digits}f}" or text == str(value)
    else:
        assert text == str(value)


def test_demo_folder_report_has_a_section_per_stage(reports):
    html = reports["demo"][0].read_text(encoding="utf-8")
    assert re.findall(r'<section class="protocol" id="[^"]+" data-protocol="(\w+)"', html) == list(PROTOCOLS)
    assert "stage extra failed: RuntimeError: &lt;/script&gt;" in html
    assert html.count("<script") == 1 and not re.search(r"https?://", html)


@pytest.mark.parametrize("name", [*PROTOCOLS, "demo"])
def test_report_in_chromium(reports, browser, name, tmp_path):
    html, _ = reports[name]
    context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    outside: list[str] = []

    def route(route_):
        if route_.request.url.startswith(("file:", "data:")):
            route_.continue_()
        else:
            outside.append(route_.request.url)
            route_.abort()

    context.route("**/*", route)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning") else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"request failed: {request.url}"))
    page.goto(html.as_uri(), wait_until="load")
    try:
        assert outside == [] and problems == []
        assert page.evaluate("window.__pwned") is None
        page.screenshot(path=str(_artefacts(tmp_path) / f"report-{name}.png"), full_page=True)
        # every metric cell equals METRICS.json (read back from the file, not from the builder)
        cells = page.eval_on_selector_all(
            "[data-metric]", "cells => cells.map(c => [c.closest('section').dataset.metricsFile, c.dataset.source, "
                             "c.dataset.path, c.dataset.value, c.textContent.trim()])")
        assert len(cells) >= 5
        sources = {source for _, source, _, _, _ in cells}
        assert sources == (set(PROTOCOLS) if name == "demo" else {name})
        files = {file: json.loads(Path(file).read_text()) for file in {c[0] for c in cells}}
        assert len(files) == len(sources)
        for file, _, path, value, text in cells:
            expected = lookup(files[file], json.loads(path))
            assert json.loads(value) == expected, path
            _check_text(text, expected)
        # the sortable tables sort: the first numeric column with several values, up then down
        column = page.evaluate("""() => {
            for (const [t, table] of [...document.querySelectorAll('table.sortable')].entries()) {
              const rows = [...table.tBodies[0].rows];
              for (let c = 0; c < table.tHead.rows[0].cells.length; c++) {
                const keys = rows.map(r => parseFloat(r.cells[c].dataset.sort));
                if (keys.every(k => !isNaN(k)) && new Set(keys).size > 1) return [t, c];
              }
            }
            return null; }""")
        assert column is not None
        table = page.locator("table.sortable").nth(column[0])
        header = table.locator("thead th").nth(column[1])
        read = f"t => [...t.tBodies[0].rows].map(r => parseFloat(r.cells[{column[1]}].dataset.sort))"
        header.click()
        up = table.evaluate(read)
        assert up == sorted(up) and header.get_attribute("aria-sort") == "ascending"
        header.click()
        assert table.evaluate(read) == sorted(up, reverse=True)
        # audio players on the failed and the extreme items; an embedded clip decodes
        if name != "arena":
            assert page.locator("[data-role=extreme] audio").count() > 0
            duration = page.locator("audio[data-embedded=yes]").first.evaluate(
                "a => new Promise(done => a.readyState >= 1 ? done(a.duration) : "
                "(a.onloadedmetadata = () => done(a.duration), a.load()))")
            assert duration > 0.1
        if name in ("reward", "judge", "naturalness"):
            failed = page.locator("[data-role=failed] article.item")
            assert failed.count() == 1 and failed.locator("audio").count() > 0
        if name == "demo":  # naturalness's results name no manifest there: said, not fatal
            assert "the results name no manifest" in page.locator("[data-protocol=naturalness]").inner_text()
        if name == "reward":
            assert "no such file" in page.locator("[data-role=failed]").inner_text()
        if name in ("arena", "demo"):
            assert page.locator("table.heatmap td[style]").count() > 0
        assert problems == [] and outside == []
    finally:
        context.close()
