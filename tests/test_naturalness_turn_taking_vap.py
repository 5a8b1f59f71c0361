"""VAP turn-taking evaluators: the network loads a state dict in the authors' released layout (key names
as their VAP_state_dict.pt, here with tiny random weights), its pieces against independent
computations, the future-activity labels by hand, the surprisal against cross_entropy, several
evaluators averaged, and the Scorer's rows batched equal to one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch
import torch.nn.functional as F
from sdscore.errors import ModelError
from sdscore.models.vap import (
    HORIZON,
    ChannelNorm,
    EncoderCPC,
    MultiHeadAttentionAlibi,
    TransformerStereo,
    VAP,
    alibi_slopes,
    build_from_state_dict,
    code_vectors,
    future_labels,
    load_state_dict_file,
)
from sdscore.protocols.naturalness.dialogue_activity import dialogue_frames
from sdscore.protocols.naturalness.scorer import MISSING_MODEL, NaturalnessScorer
from sdscore.protocols.naturalness.turn_taking_vap import (
    VapEvaluators,
    dialogue_waveform,
    evaluator_files,
    vap_surprisal,
)
from sdscore.runtime.compute_budget import torch_threads_within


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models: one thread (two threads on a loaded 2-core machine take 100x longer)."""
    with torch_threads_within(1):
        yield


def tiny_vap(seed: int = 0, ar: str = "LSTM", projection: bool = False) -> VAP:
    torch.manual_seed(seed)
    dim = 12 if projection else 8
    model = VAP(EncoderCPC(8, ar, 8, 1, 8), TransformerStereo(dim, 3 * dim, 1, 2, 2), dim, projection).eval()
    with torch.no_grad():  # LayerNorms away from 1/0 so that they matter
        for name, p in model.named_parameters():
            if name.endswith(("ln.weight", "ln_self_attn.weight", "batchNorm0.weight")):
                p.add_(0.3 * torch.randn_like(p))
    return model


def released_keys(self_layers: int, cross_layers: int, ar_layers: int = 1) -> set[str]:
    """The key names of the authors' VAP state dict (vap/modules: VAP(EncoderCPC(), TransformerStereo())),
    written out from their module tree."""
    keys = set()
    for i in range(5):
        keys |= {f"encoder.encoder.gEncoder.conv{i}.weight", f"encoder.encoder.gEncoder.conv{i}.bias",
                 f"encoder.encoder.gEncoder.batchNorm{i}.weight", f"encoder.encoder.gEncoder.batchNorm{i}.bias"}
    for k in range(ar_layers):
        keys |= {f"encoder.encoder.gAR.baseNet.{w}_l{k}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    keys |= {"encoder.downsample.1.weight", "encoder.downsample.1.bias", "encoder.downsample.2.ln.weight",
             "encoder.downsample.2.ln.bias"}
    layer = ["ln_self_attn.weight", "ln_self_attn.bias", "ln_ffnetwork.weight", "ln_ffnetwork.bias", "mha.m",
             "mha.key.weight", "mha.query.weight", "mha.value.weight", "mha.proj.weight", "ffnetwork.0.weight",
             "ffnetwork.3.weight"]
    cross = ["ln_src_attn.weight", "ln_src_attn.bias", "mha_cross.m", "mha_cross.key.weight",
             "mha_cross.query.weight", "mha_cross.value.weight", "mha_cross.proj.weight"]
    for i in range(self_layers):
        keys |= {f"transformer.ar_channel.layers.{i}.{name}" for name in layer}
    for i in range(cross_layers):
        keys |= {f"transformer.ar.layers.{i}.{name}" for name in layer + cross}
    keys |= {"transformer.ar.combinator.h0_a.weight", "transformer.ar.combinator.h0_b.weight",
             "transformer.ar.combinator.ln.weight", "transformer.ar.combinator.ln.bias",
             "objective.codebook.emb.weight", "va_classifier.weight", "va_classifier.bias", "vap_head.weight",
             "vap_head.bias"}
    return keys


# --- the network ------------------------------------------------------------------------------------


def test_state_dict_has_the_released_layout_and_loads_back(tmp_path):
    model = tiny_vap()
    sd = model.state_dict()
    assert set(sd) == released_keys(1, 2)
    assert sd["vap_head.weight"].shape == (256, 8) and sd["objective.codebook.emb.weight"].shape == (256, 8)
    assert sd["transformer.ar.layers.0.mha.m"].tolist() == pytest.approx(alibi_slopes(2))
    torch.save(sd, tmp_path / "VAP_state_dict.pt")
    loaded = load_state_dict_file(tmp_path / "VAP_state_dict.pt")
    x = torch.randn(1, 2, 16000)
    with torch.inference_mode():
        torch.testing.assert_close(loaded(x), model(x), atol=1e-6, rtol=1e-6)
    # their VAPModule_state_dict.pt: the same keys under "model."
    module = build_from_state_dict({f"model.{k}": v for k, v in sd.items()})
    with torch.inference_mode():
        torch.testing.assert_close(module(x), model(x), atol=1e-6, rtol=1e-6)
    # GRU encoders and a feature projection (encoder dim != transformer dim) load too
    for other in (tiny_vap(1, ar="GRU"), tiny_vap(2, projection=True)):
        with torch.inference_mode():
            torch.testing.assert_close(build_from_state_dict(other.state_dict())(x), other(x), atol=1e-6, rtol=1e-6)
    assert "feature_projection.projection.weight" in tiny_vap(2, projection=True).state_dict()


def test_frames_and_causality():
    model = tiny_vap()
    x = torch.randn(1, 2, 32000)
    with torch.inference_mode():
        full = model(x)
        prefix = model(x[..., :16000])
    assert full.shape == (1, 100, 256)  # 50 Hz
    # a frame's output depends on the past only, up to the CPC convolutions' short look-ahead
    torch.testing.assert_close(prefix[:, :45], full[:, :45], atol=1e-5, rtol=1e-5)


def test_alibi_attention_equals_torch_sdpa_with_the_same_bias():
    torch.manual_seed(3)
    attention = MultiHeadAttentionAlibi(16, 4)
    q, k, v = (torch.randn(2, 9, 16) for _ in range(3))
    heads = lambda x, lin: lin(x).view(2, 9, 4, 4).transpose(1, 2)  # noqa: E731
    bias = attention.m.view(1, 4, 1, 1) * torch.arange(9.0).view(1, 1, 1, 9)
    bias = bias.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    y = F.scaled_dot_product_attention(heads(q, attention.query), heads(k, attention.key), heads(v, attention.value),
                                       attn_mask=bias, scale=1 / math.sqrt(16))
    expected = attention.proj(y.transpose(1, 2).reshape(2, 9, 16))
    torch.testing.assert_close(attention(q, k, v), expected, atol=1e-6, rtol=1e-5)
    assert alibi_slopes(4) == [0.25, 0.0625, 0.015625, 0.00390625]
    assert alibi_slopes(6)[:4] == alibi_slopes(4) and len(alibi_slopes(6)) == 6


def test_channel_norm_by_hand():
    norm = ChannelNorm(5)
    x = torch.randn(2, 5, 7)
    xn = x.numpy()
    expected = (xn - xn.mean(1, keepdims=True)) / np.sqrt(xn.var(1, ddof=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(norm(x).detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def _labels_by_loop(va: np.ndarray) -> list[int]:
    """VAP's label of each frame from plain loops: bins of 10/20/30/40 frames after it, active at >= half."""
    out = []
    for t in range(len(va) - HORIZON):
        bits, start = [], t + 1
        for speaker in range(2):
            start = t + 1
            for size in (10, 20, 30, 40):
                bits.append(va[start:start + size, speaker].mean() >= 0.5)
                start += size
        out.append(sum(int(b) << j for j, b in enumerate(bits)))
    return out


def test_future_labels_by_hand_and_by_loop():
    va = np.zeros((HORIZON + 3, 2))
    va[1:11, 0] = 1  # speaker 0 fills its first bin after frame 0
    va[11:31, 1] = 1  # speaker 1 its second
    labels = future_labels(torch.from_numpy(va))
    assert labels[0] == (1 << 0) + (1 << 5)
    rng = np.random.default_rng(0)
    noisy = (rng.random((300, 2)) < 0.5).astype(float)
    assert future_labels(torch.from_numpy(noisy)).tolist() == _labels_by_loop(noisy)
    # the codebook's rows are these labels' bits (their Codebook.create_code_vectors)
    assert code_vectors()[0b10000011].tolist() == [1, 1, 0, 0, 0, 0, 0, 1]


# --- the evaluators ----------------------------------------------------------------------------------


def _save(folder, name: str, model: VAP):
    folder.mkdir(exist_ok=True)
    torch.save(model.state_dict(), folder / name)
    return folder


def test_surprisal_is_the_cross_entropy_of_the_observed_states_averaged_over_evaluators(tmp_path):
    folder = _save(_save(tmp_path / "m", "VAP_state_dict.pt", tiny_vap(0)), "seed1.pt", tiny_vap(1))
    _save(folder, "VAPModule_state_dict.pt", tiny_vap(5))  # beside VAP_state_dict.pt: skipped
    evaluators = VapEvaluators(folder)
    assert [p.name for p in evaluators.files] == ["VAP_state_dict.pt", "seed1.pt"]
    rng = np.random.default_rng(2)
    waveform = rng.normal(0, 0.1, (2, 3 * 16000)).astype(np.float32)
    asker = np.zeros(150, bool)
    asker[10:60] = True
    answerer = np.zeros(150, bool)
    answerer[70:140] = True
    got = evaluators.surprisal(waveform, asker, answerer, (65, 150))
    va = torch.zeros(150 + HORIZON + 1, 2)
    va[:150, 0], va[:150, 1] = torch.from_numpy(asker).float(), torch.from_numpy(answerer).float()
    labels = torch.tensor(_labels_by_loop(va.numpy())[:150])
    expected = []
    for model in (tiny_vap(0), tiny_vap(1)):
        with torch.inference_mode():
            logits = model(torch.from_numpy(waveform).unsqueeze(0))[0]
        expected.append(F.cross_entropy(logits[65:150], labels[65:150]).item())
    assert got == pytest.approx(np.mean(expected), rel=1e-5)


def test_dialogue_waveform_by_hand():
    question = np.stack([np.full(16000, 1.0), np.full(16000, 2.0)]).astype(np.float32)  # 1 s: asker, answerer
    answer = np.full(8000, 5.0, np.float32)
    late = dialogue_waveform(question, answer, 1.25)  # the answer 0.25 s after the question's end
    assert late.shape == (2, 28000)
    assert late[0, :16000].tolist() == [1.0] * 16000 and not late[0, 16000:].any()
    assert late[1, :16000].tolist() == [2.0] * 16000 and not late[1, 16000:20000].any()
    assert late[1, 20000:].tolist() == [5.0] * 8000
    early = dialogue_waveform(question, answer, 0.75)  # an interruption: the answerer's channel replaced
    assert early.shape == (2, 20000) and early[1, 11999] == 2.0 and early[1, 12000] == 5.0
    before = dialogue_waveform(question, answer, -0.5)  # the timeline starts at the answer
    assert before.shape == (2, 24000) and not before[0, :8000].any() and before[1, :8000].tolist() == [5.0] * 8000


def _clips(tmp_path, n: int) -> tuple[list[dict], list[dict]]:
    """n dialogues: a stereo question clip and a mono answer, the records and the rows _row made."""
    rng = np.random.default_rng(4)
    records, rows = [], []
    for i in range(n):
        q, a = tmp_path / f"q{i}.wav", tmp_path / f"a{i}.wav"
        sf.write(q, rng.normal(0, 0.1, (16000 * 2 + 800 * i, 2)).astype(np.float32), 16000)
        sf.write(a, rng.normal(0, 0.1, 16000 + 1600 * i).astype(np.float32), 16000)
        records.append({"audio_path": str(q), "answer_audio_path": str(a), "speakers": "P1|P2"})
        rows.append({"asker": "P2", "error": None, "unavailable": None, "question_duration_s": 2.0 + 0.05 * i,
                     "question_va_asker": [0.1, 1.9], "question_va_answerer": [0.5, 0.7],
                     "answer_va": [0.2, 0.9], "answer_offset_s": 2.0 + 0.05 * i + 0.3 * (i - 1),
                     "answer_duration_s": 1.0 + 0.1 * i})
    return records, rows


class _Scorer:
    """The attributes NaturalnessScorer._turn_taking_vap reads."""

    def __init__(self, turn_taking):
        self.turn_taking = turn_taking


def test_scorer_rows_batched_equal_one_by_one(tmp_path):
    evaluators = VapEvaluators(_save(tmp_path / "m", "VAP_state_dict.pt", tiny_vap(0)))
    records, rows = _clips(tmp_path, 3)
    batched = [dict(r) for r in rows]
    NaturalnessScorer._turn_taking_vap(_Scorer(evaluators), records, batched)
    for record, row, done in zip(records, rows, batched):
        alone = [dict(row)]
        NaturalnessScorer._turn_taking_vap(_Scorer(evaluators), [record], alone)
        assert done["turn_taking_vap"] is not None and alone[0]["turn_taking_vap"] == done["turn_taking_vap"]
    # the value is vap_surprisal of the asker-first channels (the asker "P2" is the clip's channel 1)
    question, _ = sf.read(records[0]["audio_path"], dtype="float32")
    answer, _ = sf.read(records[0]["answer_audio_path"], dtype="float32")
    expected = vap_surprisal(evaluators, question.T[::-1], answer, rows[0])
    assert batched[0]["turn_taking_vap"] == pytest.approx(expected, rel=1e-6)
    frames = dialogue_frames([0.1, 1.9], [0.5, 0.7], [0.2, 0.9], question_duration_s=2.0, answer_offset_s=1.7,
                             answer_duration_s=1.0, fps=50)
    assert frames.window == (85, 135)


def test_scorer_notes_without_a_model_and_for_unreadable_audio(tmp_path):
    records, rows = _clips(tmp_path, 2)
    NaturalnessScorer._turn_taking_vap(_Scorer(None), records, rows)
    assert rows[0]["unavailable"] == f"turn_taking_vap: {MISSING_MODEL['turn_taking_vap']}"
    records, rows = _clips(tmp_path, 1)
    records[0]["answer_audio_path"] = str(tmp_path / "gone.wav")
    NaturalnessScorer._turn_taking_vap(_Scorer(VapEvaluators(_save(tmp_path / "m", "x.pt", tiny_vap()))), records, rows)
    assert rows[0].get("turn_taking_vap") is None and "gone.wav" in rows[0]["unavailable"]


def test_bad_model_folders_are_clear_errors(tmp_path):
    with pytest.raises(ModelError, match="no such turn-taking model folder"):
        evaluator_files(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match=r"no VAP state dict \(\*.pt"):
        evaluator_files(tmp_path / "empty")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ModelError, match="junk.pt: cannot read a state dict"):
        load_state_dict_file(tmp_path / "junk.pt")
    sd = tiny_vap().state_dict()
    with pytest.raises(ModelError, match="not a VAP state dict .*gEncoder.conv0.weight"):
        build_from_state_dict({k: v for k, v in sd.items() if "conv0" not in k})
    with pytest.raises(ModelError, match="vap_head has 4 classes"):
        build_from_state_dict({**sd, "vap_head.weight": torch.zeros(4, 8)})
    with pytest.raises(ModelError, match="does not fit VAP's layout .*Unexpected key"):
        build_from_state_dict({**sd, "extra.weight": torch.zeros(1)})
    with pytest.raises(ModelError, match="not VAP's binary codebook"):
        build_from_state_dict({**sd, "objective.codebook.emb.weight": torch.zeros(256, 8)})
    with pytest.raises(ModelError, match="a GRU has 24, an LSTM 32"):
        build_from_state_dict({**sd, "encoder.encoder.gAR.baseNet.weight_ih_l0": torch.zeros(5, 8)})
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ModelError, match="holds a list, not a state dict"):
        load_state_dict_file(tmp_path / "list.pt")


def test_the_scorer_option_loads_the_folder(tmp_path):
    from sdscore.protocols.naturalness.scorer import scoring_job
    from sdscore.runtime.settings import SettingsError

    folder = _save(tmp_path / "m", "VAP_state_dict.pt", tiny_vap())
    job = scoring_job(turn_taking_model=str(folder))
    assert job.settings == {"turn_taking_model": str(folder)} and job.model_dir == str(folder)
    scorer = NaturalnessScorer(turn_taking_model=folder, jobs=1)
    try:
        assert [p.name for p in scorer.turn_taking.files] == ["VAP_state_dict.pt"]
    finally:
        scorer.close()
    with pytest.raises(ModelError, match="no VAP state dict"):
        NaturalnessScorer(turn_taking_model=tmp_path, jobs=1)
    with pytest.raises(SettingsError, match="turn_taking_model must be"):
        NaturalnessScorer(turn_taking_model=3, jobs=1)


def test_the_models_see_15_s_before_the_answer_window(tmp_path):
    evaluators = VapEvaluators(_save(tmp_path / "m", "VAP_state_dict.pt", tiny_vap(0)))
    rng = np.random.default_rng(7)
    waveform = rng.normal(0, 0.1, (2, 17 * 16000)).astype(np.float32)
    asker = rng.random(850) < 0.4
    answerer = rng.random(850) < 0.4
    got = evaluators.surprisal(waveform, asker, answerer, (830, 850))
    # by hand: the input from frame 830 - 750 = 80 on (sample 80 x 320), the labels from the same frames
    va = np.zeros((770 + HORIZON + 1, 2))
    va[:770, 0], va[:770, 1] = asker[80:], answerer[80:]
    labels = torch.tensor(_labels_by_loop(va)[750:770])
    with torch.inference_mode():
        logits = tiny_vap(0)(torch.from_numpy(waveform[:, 80 * 320:]).unsqueeze(0))[0]
    assert got == pytest.approx(F.cross_entropy(logits[750:770], labels).item(), rel=1e-5)


def test_hostile_state_dicts_are_clear_errors(tmp_path):
    """Values that are not tensors, 0-d or empty size tensors and NaN weights: one ModelError naming the
    entry (was: AttributeError / IndexError / ZeroDivisionError tracebacks, and NaN surprisals)."""
    sd = tiny_vap().state_dict()
    with pytest.raises(ModelError, match=r"x\.pt: not a VAP state dict \(entry 'vap_head\.weight' holds a int"):
        build_from_state_dict({**sd, "vap_head.weight": 5}, "x.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk\n")  # was: "cannot read a state dict (KeyError: 174812789)"
    with pytest.raises(ModelError, match=r"junk\.pt: cannot read a state dict: not a file torch\.save wrote \(it "
                                         r"starts with b'junk';"):
        load_state_dict_file(tmp_path / "junk.pt")
    with pytest.raises(ModelError, match=r"entry 5 holds a Tensor"):
        build_from_state_dict({**sd, 5: torch.zeros(1)})
    with pytest.raises(ModelError, match=r"has no dimension \(a 0-d tensor\)"):
        build_from_state_dict({**sd, "vap_head.weight": torch.tensor(3.0)})
    with pytest.raises(ModelError, match=r"a size of 0 \(attention heads\)"):
        build_from_state_dict({**sd, "transformer.ar_channel.layers.0.mha.m": torch.zeros(0)})
    with pytest.raises(ModelError, match=r"a size of 0 \(gEncoder conv0 channels\)"):
        build_from_state_dict({**sd, "encoder.encoder.gEncoder.conv0.weight": torch.zeros(0, 1, 10)})
    spoiled = {**sd, "vap_head.weight": sd["vap_head.weight"].clone()}
    spoiled["vap_head.weight"][0, 0] = float("inf")
    with pytest.raises(ModelError, match=r"vap_head\.weight holds NaN or infinite values"):
        build_from_state_dict(spoiled)
