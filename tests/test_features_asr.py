"""ASR with word timings (pocketsphinx bundled; Whisper from a local dir) and the speech rates."""

from __future__ import annotations

import difflib
import json

import numpy as np
import pytest
from features_audio import RATE, SENTENCES, batch_of, read16, render
from sdscore.errors import ModelError
from sdscore.features import extract, make_extractor
from sdscore.features.rate import speech_rates


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    paths = render(tmp_path_factory.mktemp("asr"), ("slt", "awb"))
    return {name: read16(p) for name, p in paths.items()}


@pytest.fixture(scope="module")
def sphinx():
    pytest.importorskip("pocketsphinx")
    return make_extractor("asr")


def words_of(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalpha() or c in " '").split()


def test_pocketsphinx_transcribes_flite_speech_with_word_times(speech, sphinx):
    items = [speech["slt"], np.zeros(0, np.float32), speech["awb"]]
    out = sphinx.run(batch_of(items), {})
    said = words_of(SENTENCES["slt"][2])
    heard = out["transcript"][0].split()
    assert difflib.SequenceMatcher(None, said, heard).ratio() > 0.8, heard
    assert out["transcript"][1] == "" and out["words"][1] == []
    for text, words, x in zip(out["transcript"], out["words"], items):
        assert text == " ".join(w["word"] for w in words)
        starts = [w["start"] for w in words]
        assert starts == sorted(starts)
        assert all(0 <= w["start"] < w["end"] <= len(x) / RATE + 0.05 for w in words)
        assert all(
            "(" not in w["word"] and not w["word"].startswith(("<", "[")) for w in words
        )
    alone = sphinx.run(batch_of([speech["awb"]]), {})
    assert alone["words"][0] == out["words"][2]


def test_rate_from_asr_words(speech, sphinx):
    frame = extract([sphinx, "rate"], batch_of([speech["slt"]]))
    words = frame["words"][0].to_list()
    duration = len(speech["slt"]) / RATE
    assert frame["speech_rate_wpm"][0] == pytest.approx(len(words) / duration * 60)
    assert frame["articulation_rate_wpm"][0] == pytest.approx(
        len(words) / sum(w["end"] - w["start"] for w in words) * 60
    )
    assert frame["articulation_rate_wpm"][0] > frame["speech_rate_wpm"][0]


def test_speech_rate_definitions():
    words = [
        {"word": "a", "start": 0.0, "end": 0.5},
        {"word": "b", "start": 1.0, "end": 1.5},
    ]
    assert speech_rates(words, 4.0) == (30.0, 120.0)
    assert speech_rates([], 4.0) == (0.0, None)
    assert speech_rates([], 0.0) == (None, None)


def test_unknown_backend_is_refused():
    with pytest.raises(
        ValueError, match="unknown asr backend 'kaldi'; use 'pocketsphinx' or 'whisper'"
    ):
        make_extractor("asr", backend="kaldi")


# --- Whisper from a local directory: a tiny random-weight model in the exact HF layout ---------


def build_tiny_whisper(folder, alignment_heads=((0, 0), (0, 1))):
    """Whisper config/weights/generation config + a byte-level BPE tokenizer, all built offline."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = {c: i for i, c in enumerate(ByteLevel.alphabet())}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    specials = [
        "<|endoftext|>",
        "<|startoftranscript|>",
        "<|en|>",
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
    ]
    specials += [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    for s in specials:
        vocab[s] = len(vocab)
    tokenizer = transformers.WhisperTokenizer(vocab=vocab, merges=merges)
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in specials}
    eos, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = transformers.WhisperConfig(
        vocab_size=len(vocab),
        num_mel_bins=80,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        d_model=32,
        max_source_positions=1500,
        max_target_positions=64,
        pad_token_id=eos,
        bos_token_id=eos,
        eos_token_id=eos,
        decoder_start_token_id=sot,
    )
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=sot,
        eos_token_id=eos,
        pad_token_id=eos,
        bos_token_id=eos,
        max_length=64,
        is_multilingual=True,
        lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={
            "transcribe": ids["<|transcribe|>"],
            "translate": ids["<|translate|>"],
        },
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        alignment_heads=[list(h) for h in alignment_heads] or None,
        begin_index=4,
        # random weights may pick end-of-text first (argmax near-ties move with thread counts and
        # test order): hold it off for a few tokens so the model always emits text to time
        min_new_tokens=4,
        # so random weights emit text: no special token, and no byte-level whitespace token (four
        # spaces in a row would time no word at all)
        suppress_tokens=[i for s, i in ids.items() if s != "<|endoftext|>"]
        + [vocab[c] for c in ("Ġ", "Ċ", "ĉ", "č")],
    )
    model.save_pretrained(folder)
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    transformers.WhisperProcessor(
        feature_extractor=extractor, tokenizer=tokenizer
    ).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    folder = build_tiny_whisper(tmp_path_factory.mktemp("whisper"))
    return make_extractor(
        "asr",
        backend="whisper",
        model_dir=str(folder),
        language="en",
        max_new_tokens=12,
        batch_size=4,
    )


def test_whisper_loads_from_a_local_dir_and_times_its_words(whisper, speech):
    long = np.concatenate([speech["slt"]] * 9)[: 31 * RATE]
    items = [speech["slt"], np.zeros(0, np.float32), long]
    out = whisper.run(batch_of(items), {})
    assert out["transcript"][1] == "" and out["words"][1] == []
    for text, words in zip(out["transcript"], out["words"]):
        assert text == " ".join(w["word"] for w in words)
        assert all(w["word"] and w["start"] <= w["end"] for w in words)
    assert out["words"][0], "the tiny model emits text tokens (timestamps suppressed)"
    assert any(w["start"] >= 30.0 for w in out["words"][2]), (
        "the second 30 s piece is offset by 30 s"
    )
    alone = whisper.run(batch_of([speech["slt"]]), {})
    assert alone["transcript"][0] == out["transcript"][0]
    np.testing.assert_allclose(
        [w["start"] for w in alone["words"][0]],
        [w["start"] for w in out["words"][0]],
        atol=0.021,
    )


def test_whisper_tokens_group_into_words_at_leading_spaces(whisper):
    tok = whisper.processor.tokenizer
    ids = tok.convert_tokens_to_ids(
        [
            "<|startoftranscript|>",
            "<|en|>",
            "<|transcribe|>",
            "<|notimestamps|>",
            "Ġthe",
            "h",
            "Ġt",
            "he",
            "<|endoftext|>",
        ]
    )
    times = [0.0, 0.0, 0.0, 0.0, 0.1, 0.3, 0.5, 0.7, 0.9]
    assert whisper.words(ids, times) == [
        {"word": "theh", "start": 0.1, "end": 0.5},
        {"word": "the", "start": 0.5, "end": 0.9},
    ]


def test_whisper_without_alignment_heads_is_refused(tmp_path):
    folder = build_tiny_whisper(tmp_path / "noheads", alignment_heads=())
    with pytest.raises(ModelError, match="no alignment_heads, needed for word timings"):
        make_extractor("asr", backend="whisper", model_dir=str(folder))


def test_whisper_bad_directories_are_refused(tmp_path):
    with pytest.raises(
        ModelError, match="not a Whisper model directory \\(no config.json\\)"
    ):
        make_extractor("asr", backend="whisper", model_dir=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    with pytest.raises(ModelError, match="cannot load a Whisper model and processor"):
        make_extractor("asr", backend="whisper", model_dir=str(tmp_path))
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        make_extractor("asr", backend="whisper", model_dir=str(tmp_path), batch_size=0)
