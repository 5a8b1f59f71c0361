"""A protocol is its package plus one registry entry: a toy sixth protocol (tests/toy_protocol) runs
`score`, `eval` and `report` through the CLI and is read by name through sdscore's manifest API, the
layers outside the protocol packages name no protocol beyond a listed allowlist, and corpus/ looks
nothing up by a protocol's name."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile

import sdscore
from sdscore.cli import main
from sdscore.errors import ManifestError
from sdscore.protocols import registry
from sdscore.protocols.registry import ProtocolEntry

TOY = ProtocolEntry("toy", "a test's toy protocol: word counts of clips", "toy_protocol", scores=True,
                    spec="toy_protocol.spec:SPEC", metrics_keys=("n", "mean_score"),
                    results_help="the results of `sdscore score toy`: one file")


@pytest.fixture
def toy():
    registry.register(TOY)
    try:
        yield TOY
    finally:
        registry.unregister("toy")


def test_a_toy_protocol_scores_evaluates_and_reports_through_the_cli(toy, tmp_path):
    clip = tmp_path / "clip.wav"
    soundfile.write(clip, (0.1 * np.sin(np.arange(8000) / 5)).astype(np.float32), 16000)
    rows = [{"clip_id": "a", "words": "one two three", "audio_path": "clip.wav", "mood": "calm"},
            {"clip_id": "b", "words": "route 66", "audio_path": "clip.wav", "mood": "loud"},  # the spec's row check
            {"clip_id": "c", "words": "hello", "audio_path": "clip.wav", "mood": "sad"}]  # not an allowed mood
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out, metrics, html = tmp_path / "out.parquet", tmp_path / "metrics.json", tmp_path / "report.html"

    assert main(["score", "toy", str(manifest), "--out", str(out), "--weight", "2"]) == 1  # two rows failed
    results = pl.read_parquet(out)
    assert results["score"].to_list() == [6.0, None, None]
    assert results["error"][0] is None
    assert "column 'words': 'route 66' holds a digit" in results["error"][1]
    assert "column 'mood': 'sad' is not one of calm, loud" in results["error"][2]

    assert main(["eval", "toy", str(out), "--out", str(metrics)]) == 0
    assert json.loads(metrics.read_text()) == {"n": 3, "failed": 2, "mean_score": 6.0}

    assert main(["report", "--protocol", "toy", str(out), "--metrics", str(metrics), "--out", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "route 66" in page and "holds a digit" in page and "data:audio" in page


def test_the_report_refuses_another_protocols_metrics_for_the_toy(toy, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    pl.DataFrame({"clip_id": ["a"], "score": [1.0], "error": [None]}, schema_overrides={"error": pl.String}
                 ).write_parquet(out)
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"n_battles": 3, "bradley_terry": {}}))
    assert main(["report", "--protocol", "toy", str(out), "--metrics", str(metrics),
                 "--out", str(tmp_path / "r.html")]) == 2
    assert re.search(r"does not hold the metrics of `sdscore eval toy` \(no n, mean_score\); it looks like the "
                     r"metrics of eval arena", capsys.readouterr().err.replace("\n", ""))


def test_register_refuses_a_known_name_and_an_entry_without_a_spec(toy):
    with pytest.raises(ValueError, match="protocol 'toy' is already registered"):
        registry.register(TOY)
    with pytest.raises(ValueError, match="protocol 'toy2': its entry names no manifest spec"):
        registry.register(ProtocolEntry("toy2", "no spec", "toy_protocol", scores=True))
    with pytest.raises(ValueError, match="unknown protocol 'toy3'"):
        registry.unregister("toy3")


ENGINE = Path(__file__).resolve().parents[1] / "engine" / "sdscore"
#: the layers outside the protocol packages that must not name a protocol
OUTSIDE = ("cli", "corpus", "report", "runtime", "synth", "demo.py", "report_document.py")
NAME = re.compile(r"[\"'](reward|judge|consistency|naturalness|arena)[\"']")
#: what still names a built-in protocol outside its package, file → count, and why:
ALLOWED = {
    # readers of formats that belong to one built-in protocol give its name as the format's hint (matched
    # against the specs handed in, never looked up):
    "corpus/hcot_format.py": 1, "corpus/hf_dataset_format.py": 2, "corpus/kaldi_format.py": 1,
    "corpus/lhotse_format.py": 1, "corpus/native_format.py": 1, "corpus/sdiareward_format.py": 1,
    "corpus/webdataset_format.py": 1,
    "corpus/schemas.py": 1,  # the arena battles' "judge" column
    "cli/train.py": 1,  # the reward-only command `train reward`
    "report/judge_plots.py": 2, "report/reward_plots.py": 1,  # the plots eval draws, named after their protocol
    "runtime/reward/onnx_export.py": 1, "runtime/reward/onnx_sidecar.py": 1,  # the reward model's runtime
    # the synthetic corpus builds the five built-in protocols' data
    "synth/build.py": 23, "synth/battles.py": 1, "synth/consistency_instances.py": 1,
}


def protocol_names_outside_packages(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for part in OUTSIDE:
        for path in sorted([root / part] if part.endswith(".py") else (root / part).rglob("*.py")):
            if not path.is_file():
                continue
            found = len(NAME.findall(path.read_text(encoding="utf-8")))
            if found:
                counts[path.relative_to(root).as_posix()] = found
    return counts


def test_no_layer_outside_the_protocols_names_a_protocol_beyond_the_allowlist():
    assert protocol_names_outside_packages(ENGINE) == ALLOWED
    for upper in ("cli/score.py", "cli/report.py", "demo.py", "report_document.py", "runtime/run.py"):
        assert upper not in ALLOWED


def test_the_count_sees_a_planted_name(tmp_path):
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "x.py").write_text('if protocol == "arena":\n    pass\n')
    assert protocol_names_outside_packages(tmp_path) == {"cli/x.py": 1}


def test_the_toy_protocol_is_read_by_name_through_sdscore(toy, tmp_path):
    from toy_protocol.spec import SPEC

    (tmp_path / "audio").mkdir()
    rows = [{"clip_id": "a", "words": "one two", "audio_path": "audio/a.wav"},
            {"clip_id": "b", "words": "three", "audio_path": "audio/b.wav"}]
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))

    assert sdscore.manifest_spec("toy") is SPEC and list(sdscore.manifest_specs())[-1] == "toy"
    frame = sdscore.read_manifest(manifest, "toy")
    assert frame.columns == list(SPEC.schema.names())
    assert frame["audio_path"].to_list() == [str(tmp_path / "audio" / "a.wav"), str(tmp_path / "audio" / "b.wav")]
    assert sdscore.read_manifest(manifest).equals(frame)  # inferred: only the toy's required columns fit
    assert sdscore.infer_protocol(["clip_id", "words"]) == "toy"
    assert sdscore.audio_paths(frame, "toy") == frame["audio_path"].to_list()
    relative = pl.DataFrame(rows).with_columns(pl.lit(None, pl.String).alias("mood"))
    assert sdscore.resolve_audio_paths(relative, "toy", "/m")["audio_path"].to_list() == ["/m/audio/a.wav",
                                                                                          "/m/audio/b.wav"]
    with pytest.raises(ManifestError, match=r"clips: row 2, column 'words': '3 words' holds a digit"):
        sdscore.validate_manifest(pl.DataFrame({"clip_id": ["a", "b"], "words": ["ok", "3 words"]}), "toy", "clips")


def test_an_unregistered_protocol_is_unknown_to_the_manifest_api(tmp_path):
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text(json.dumps({"clip_id": "a", "words": "one"}) + "\n")
    with pytest.raises(ManifestError, match=r"clips\.jsonl: unknown protocol 'toy'; expected one of reward, judge, "
                                            r"consistency, naturalness, arena$"):
        sdscore.read_manifest(manifest, "toy")
    with pytest.raises(ManifestError, match=r"cannot tell the protocol from the columns \(clip_id, words\)"):
        sdscore.read_manifest(manifest)


BUILT_IN = {"reward", "judge", "consistency", "naturalness", "arena"}


def name_lookups(folder: Path) -> list[str]:
    """Where modules under folder look something up by a built-in protocol's name (a name as a dict key,
    a subscript, the key of .get/.pop/.setdefault, a comparison operand or a protocol=/spec= argument),
    or define a ManifestSpec at module level (make_spec(...) / ManifestSpec(...)): "file:line: what"
    each, in line order. A polars schema's column named like a protocol (the battles' "judge" column)
    is a column, not a lookup."""
    def named(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in BUILT_IN

    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = path.relative_to(folder).as_posix()
        columns = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("Schema", "Struct")
                   for arg in node.args}
        for node in ast.walk(tree):
            hits = []
            if isinstance(node, ast.Dict) and id(node) not in columns:
                hits = [key for key in node.keys if key is not None and named(key)]
            elif isinstance(node, ast.Subscript):
                hits = [node.slice] if named(node.slice) else []
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("get", "pop", "setdefault")):
                hits = [arg for arg in node.args[:1] if named(arg)]
            elif isinstance(node, ast.keyword) and node.arg in ("protocol", "spec"):
                hits = [node.value] if named(node.value) else []
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                elements = [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set)) for e in o.elts]
                hits = [o for o in [*operands, *elements] if named(o)]
            found += [(where, hit.lineno, repr(hit.value)) for hit in hits]
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("make_spec", "ManifestSpec"):
                found.append((where, node.lineno, "a ManifestSpec"))
    return [f"{where}:{line}: {what}" for where, line, what in sorted(found)]


def test_corpus_looks_no_protocol_up_by_name():
    assert name_lookups(ENGINE / "corpus") == []
    assert not (ENGINE / "corpus" / "builtin_specs.py").exists()


def test_the_name_lookup_scan_sees_planted_lookups(tmp_path):
    (tmp_path / "x.py").write_text('SPECS = {"reward": 1}\nA = SPECS["judge"]\nB = SPECS.get("arena")\n'
                                   'C = hint == "naturalness"\nD = hint in ("consistency", None)\n'
                                   'E = make_spec("toy")\nF = table("reward", "SDiaReward")\n'
                                   'G = pl.Schema({"judge": pl.String})\nH = read(path, protocol="reward")\n')
    assert name_lookups(tmp_path) == ["x.py:1: 'reward'", "x.py:2: 'judge'", "x.py:3: 'arena'",
                                      "x.py:4: 'naturalness'", "x.py:5: 'consistency'", "x.py:6: a ManifestSpec",
                                      "x.py:9: 'reward'"]
