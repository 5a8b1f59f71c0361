"""Speaker embedders: GE2E against resemblyzer, ECAPA/WavLM loaders on tiny random models, the cache.

Batched results must equal one-at-a-time results; ECAPA is also checked against an independent
per-item forward written from SpeechBrain's source (reflect padding, unmasked statistics).
"""

import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sdscore.audio import AudioBatch, load_many
from sdscore.errors import AudioError, ModelError
from sdscore.features.speaker import SpeakerEmbedder
from sdscore.features.speaker.ecapa import EcapaEncoder, EcapaTdnn, reflect_index
from sdscore.features.speaker.speechbrain_layout import Fbank, read_hyperparams
from sdscore.ragged import pack

HAS_TTS = shutil.which("flite") is not None and shutil.which("espeak-ng") is not None
SENTENCES = [
    "Yes.",
    "The weather is lovely today.",
    "Could you tell me where the nearest station is, please?",
    "I think we should leave early tomorrow morning, before the traffic gets bad on the highway.",
    ("Numbers like forty two and seven hundred are read out loud by the synthesizer, one after another, "
     "until the sentence finally comes to an end."),
]


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@pytest.fixture(scope="module")
def tts_files(tmp_path_factory) -> list[str]:
    """Ten real TTS files, 1-6 s: flite voices (16 kHz) and espeak-ng voices (22.05 kHz)."""
    if not HAS_TTS:
        pytest.skip("flite and espeak-ng are needed to render test speech")
    folder = tmp_path_factory.mktemp("tts")
    paths = []
    for i, (voice, text) in enumerate(zip(["slt", "kal", "awb", "rms", "slt"], SENTENCES)):
        path = folder / f"flite_{i}.wav"
        subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True)
        paths.append(str(path))
    for i, (voice, text) in enumerate(zip(["en-us", "en+f3", "en-gb", "en+m3", "en+f2"], SENTENCES[::-1])):
        path = folder / f"espeak_{i}.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def resemblyzer():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("resemblyzer")


@pytest.fixture(scope="module")
def ge2e():
    pytest.importorskip("resemblyzer")
    return SpeakerEmbedder("ge2e")


# ---------------------------------------------------------------- GE2E


def test_ge2e_matches_resemblyzer_per_file(tts_files, resemblyzer, ge2e):
    encoder = resemblyzer.VoiceEncoder("cpu", verbose=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the peer's 2-thread LSTM crawls on a shared 2-core machine
    try:
        expected = np.stack([encoder.embed_utterance(resemblyzer.preprocess_wav(p)) for p in tts_files])
    finally:
        torch.set_num_threads(threads)
    ours = ge2e.embed_files(tts_files)
    assert ours.shape == (len(tts_files), 256) and ours.dtype == np.float32
    assert cosine(ours, expected).min() >= 0.999


def test_ge2e_batched_equals_one_at_a_time(tts_files, ge2e):
    batch = load_many(tts_files)
    together, errors = ge2e.encoder.embed_waveforms(list(batch))
    alone = np.stack([ge2e.encoder.embed_waveforms([w])[0][0] for w in batch])
    assert errors == [None] * len(tts_files)
    # bit for bit: every forward has the same row count, so a file's embedding does not depend on
    # which files share its call (a resumed run once differed from a whole one in the 8th digit)
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(ge2e.encoder.embed_waveforms(list(batch)[::-1])[0][::-1], together)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_ge2e_preprocessing_is_resemblyzers(tts_files, resemblyzer):
    from resemblyzer import audio, voice_encoder

    from sdscore.features.speaker import ge2e

    vad = ge2e._webrtcvad()
    for path in tts_files[:4]:
        wav = load_many([path]).data
        normalized = ge2e.normalize_volume(wav)
        np.testing.assert_array_equal(normalized, audio.normalize_volume(wav, -30, increase_only=True))
        np.testing.assert_array_equal(ge2e.trim_long_silences(normalized, vad), audio.trim_long_silences(normalized))
    for n in [0, 1, 159, 16000, 25599, 25600, 25601, 37000, 96000, 160123]:
        _, slices = voice_encoder.VoiceEncoder.compute_partial_slices(n, 1.3, 0.75)
        assert ge2e.partial_starts(n).tolist() == [s.start for s in slices]


def test_ge2e_unusable_audio_gets_an_error_per_item(ge2e):
    speech_free = [np.zeros(16000, np.float32), np.full(8000, np.nan, np.float32), np.zeros(0, np.float32),
                   np.full(16000, 0.01, np.float32)]
    embeddings, errors = ge2e.encoder.embed_waveforms(speech_free)
    assert errors[0].startswith("audio is silent") and "NaN" in errors[1] and errors[2] == "audio is empty"
    assert errors[3] == "no speech found by voice activity detection"
    assert np.isnan(embeddings).all()


def test_ge2e_errors(tmp_path):
    from sdscore.features.speaker import ge2e

    pytest.importorskip("resemblyzer")
    with pytest.raises(ModelError, match="GE2E weights not found"):
        ge2e.Ge2eEncoder(tmp_path / "missing.pt")
    torch.save({"model_state": {"lstm.weight_ih_l0": torch.zeros(3)}}, tmp_path / "bad.pt")
    with pytest.raises(ModelError, match="not a GE2E checkpoint"):
        ge2e.Ge2eEncoder(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        ge2e.Ge2eEncoder(workers=0)
    with pytest.raises(ValueError, match="rate 0.5 gives a frame step of 200"):
        ge2e.partial_starts(16000, rate=0.5)


# ---------------------------------------------------------------- ECAPA (SpeechBrain layout)

ECAPA_YAML = """\
n_mels: 24
emb_dim: 16
pretrained_path: speechbrain/spkrec-ecapa-tiny
compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: !ref <n_mels>
mean_var_norm: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
    std_norm: False
embedding_model: !new:speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN
    input_size: !ref <n_mels>
    channels: [32, 32, 32, 32, 96]
    kernel_sizes: [5, 3, 3, 3, 1]
    dilations: [1, 2, 3, 4, 1]
    attention_channels: 8
    res2net_scale: 4
    se_channels: 8
    lin_neurons: !ref <emb_dim>
    activation: !name:torch.nn.ReLU
mean_var_norm_emb: !new:speechbrain.processing.features.InputNormalization
    norm_type: global
    std_norm: False
modules:
    compute_features: !ref <compute_features>
    embedding_model: !ref <embedding_model>
pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        embedding_model: !ref <embedding_model>
    paths:
        embedding_model: !ref <pretrained_path>/embedding_model.ckpt
"""
DILATIONS = [1, 2, 3, 4, 1]


def _random_ecapa() -> EcapaTdnn:
    torch.manual_seed(0)
    net = EcapaTdnn(24, lin_neurons=16, channels=[32, 32, 32, 32, 96], attention_channels=8, res2net_scale=4,
                    se_channels=8)
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.normal_(0, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.normal_(0, 0.1)
    return net


@pytest.fixture(scope="module")
def ecapa_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ecapa")
    (folder / "hyperparams.yaml").write_text(ECAPA_YAML)
    torch.save(_random_ecapa().state_dict(), folder / "embedding_model.ckpt")
    stats = {"count": 3, "glob_mean": torch.linspace(-1, 1, 16), "glob_std": torch.tensor([1.0]),
             "spk_dict_mean": {}, "spk_dict_std": {}, "spk_dict_count": {}}
    torch.save(stats, folder / "mean_var_norm_emb.ckpt")
    return folder


def _sb_conv(sd, prefix, x, dilation=1):
    """SpeechBrain Conv1d: reflect-pad to 'same' length, then convolve."""
    weight = sd[f"{prefix}.conv.weight"]
    pad = dilation * (weight.shape[-1] - 1) // 2
    return F.conv1d(F.pad(x, (pad, pad), mode="reflect") if pad else x, weight, sd[f"{prefix}.conv.bias"],
                    dilation=dilation)


def _sb_tdnn(sd, prefix, x, dilation=1):
    norm = f"{prefix}.norm.norm"
    y = F.relu(_sb_conv(sd, f"{prefix}.conv", x, dilation))
    return F.batch_norm(y, sd[f"{norm}.running_mean"], sd[f"{norm}.running_var"], sd[f"{norm}.weight"],
                        sd[f"{norm}.bias"], False, 0.0, 1e-5)


def _speechbrain_ecapa(sd: dict, feats: torch.Tensor, scale: int = 4) -> torch.Tensor:
    """ECAPA_TDNN.forward(feats[None]) for one item, written from SpeechBrain's source."""
    x = _sb_tdnn(sd, "blocks.0", feats.T[None], DILATIONS[0])
    hidden = []
    for i in range(1, 4):
        p = f"blocks.{i}"
        residual = _sb_conv(sd, f"{p}.shortcut", x) if f"{p}.shortcut.conv.weight" in sd else x
        parts = torch.chunk(_sb_tdnn(sd, f"{p}.tdnn1", x), scale, dim=1)
        ys = [parts[0], _sb_tdnn(sd, f"{p}.res2net_block.blocks.0", parts[1], DILATIONS[i])]
        for j in range(2, scale):
            ys.append(_sb_tdnn(sd, f"{p}.res2net_block.blocks.{j - 1}", parts[j] + ys[-1], DILATIONS[i]))
        h = _sb_tdnn(sd, f"{p}.tdnn2", torch.cat(ys, dim=1))
        s = F.relu(_sb_conv(sd, f"{p}.se_block.conv1", h.mean(dim=2, keepdim=True)))
        x = torch.sigmoid(_sb_conv(sd, f"{p}.se_block.conv2", s)) * h + residual
        hidden.append(x)
    x = _sb_tdnn(sd, "mfa", torch.cat(hidden, dim=1))
    width = x.shape[-1]
    mean = x.mean(dim=2)
    std = torch.sqrt(((x - mean[..., None]) ** 2).mean(dim=2).clamp(1e-12))
    attn = torch.cat([x, mean[..., None].expand(-1, -1, width), std[..., None].expand(-1, -1, width)], dim=1)
    attn = F.softmax(_sb_conv(sd, "asp.conv", torch.tanh(_sb_tdnn(sd, "asp.tdnn", attn))), dim=2)
    mean = (attn * x).sum(2)
    std = torch.sqrt((attn * (x - mean[..., None]) ** 2).sum(2).clamp(1e-12))
    pooled = torch.cat([mean, std], dim=1)[..., None]
    pooled = F.batch_norm(pooled, sd["asp_bn.norm.running_mean"], sd["asp_bn.norm.running_var"],
                          sd["asp_bn.norm.weight"], sd["asp_bn.norm.bias"], False, 0.0, 1e-5)
    return _sb_conv(sd, "fc", pooled)[0, :, 0]


def _noise_waves(lengths, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = [np.arange(n) / 16000 for n in lengths]
    return [(0.3 * np.sin(2 * np.pi * (120 + 40 * k) * x) + 0.05 * rng.standard_normal(len(x))).astype(np.float32)
            for k, x in enumerate(t)]


def test_ecapa_checkpoint_keys_are_speechbrains():
    keys = set(_random_ecapa().state_dict())
    for key in ["blocks.0.conv.conv.weight", "blocks.0.norm.norm.running_var", "blocks.1.tdnn1.conv.conv.weight",
                "blocks.1.res2net_block.blocks.2.conv.conv.weight", "blocks.3.se_block.conv2.conv.bias",
                "mfa.conv.conv.weight", "asp.tdnn.conv.conv.weight", "asp.conv.conv.weight",
                "asp_bn.norm.weight", "fc.conv.weight"]:
        assert key in keys


def test_ecapa_loader_matches_speechbrain_forward_and_batching(ecapa_dir):
    encoder = EcapaEncoder(ecapa_dir)
    assert encoder.dim == 16 and encoder.sample_rate == 16000
    waves = _noise_waves([16000, 4000, 12345, 16000, 900, 7001])
    batched, errors = encoder.embed_waveforms(waves)
    assert errors == [None] * len(waves)
    state = torch.load(ecapa_dir / "embedding_model.ckpt", weights_only=True)
    fbank = Fbank(n_mels=24)
    for wave, ours in zip(waves, batched):
        feats = fbank(torch.from_numpy(wave))
        expected = _speechbrain_ecapa(state, feats - feats.mean(dim=0)).detach().numpy()
        assert rel_err(ours, expected) < 1e-4
    alone = np.stack([encoder.embed_waveforms([w])[0][0] for w in waves])
    assert rel_err(batched, alone) < 1e-5


def test_ecapa_embedding_normalisation_and_errors(ecapa_dir, tmp_path):
    waves = _noise_waves([8000, 100, 0])
    raw, errors = EcapaEncoder(ecapa_dir).embed_waveforms(waves)
    normalized, _ = EcapaEncoder(ecapa_dir, normalize_embeddings=True).embed_waveforms(waves)
    np.testing.assert_allclose(normalized[0], raw[0] - np.linspace(-1, 1, 16), atol=1e-5)
    assert errors[1] == "audio too short for ECAPA: 1 frames, needs >= 5" and errors[2] == "audio is empty"
    with pytest.raises(ModelError, match="no embedding_model.ckpt"):
        EcapaEncoder(tmp_path)
    shutil.copy(ecapa_dir / "hyperparams.yaml", tmp_path)
    torch.save({"fc.conv.weight": torch.zeros(1)}, tmp_path / "embedding_model.ckpt")
    with pytest.raises(ModelError, match="does not fit the ECAPA_TDNN"):
        EcapaEncoder(tmp_path)
    (tmp_path / "hyperparams.yaml").write_text(ECAPA_YAML.replace("torch.nn.ReLU", "torch.nn.GELU"))
    with pytest.raises(ModelError, match="unsupported ECAPA activation 'GELU'"):
        EcapaEncoder(tmp_path)
    (tmp_path / "hyperparams.yaml").write_text(ECAPA_YAML.replace("norm_type: sentence", "norm_type: global"))
    with pytest.raises(ModelError, match="global InputNormalization needs its statistics file"):
        EcapaEncoder(tmp_path)


def test_hyperparams_references_resolve(ecapa_dir, tmp_path):
    hparams = read_hyperparams(ecapa_dir / "hyperparams.yaml")
    assert hparams["embedding_model"].kwargs["lin_neurons"] == 16
    assert hparams["pretrainer"].kwargs["paths"]["embedding_model"] == "speechbrain/spkrec-ecapa-tiny/embedding_model.ckpt"
    assert hparams["modules"]["embedding_model"].target == "speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN"
    (tmp_path / "h.yaml").write_text("a: 3\nb: !ref <a> * 2 + 1\nc: !ref <missing>\n")
    with pytest.raises(ModelError, match="names no key"):
        read_hyperparams(tmp_path / "h.yaml")
    (tmp_path / "h.yaml").write_text("a: 3\nb: !ref <a> * 2 + 1\n")
    assert read_hyperparams(tmp_path / "h.yaml")["b"] == 7


def test_fbank_matches_numpy():
    wave = _noise_waves([5000])[0]
    ours = Fbank(n_mels=24)(torch.from_numpy(wave)).numpy()
    padded = np.pad(wave.astype(np.float64), (200, 200))
    frames = np.stack([padded[i * 160: i * 160 + 400] for i in range(1 + len(wave) // 160)])
    power = np.abs(np.fft.rfft(frames * np.hamming(401)[:-1], 400)) ** 2
    mel = np.linspace(0, 2595 * np.log10(1 + 8000 / 700), 26)
    hz = 700 * (10 ** (mel / 2595) - 1)
    freqs = np.linspace(0, 8000, 201)
    filters = np.maximum(0, 1 - np.abs(freqs[None, :] - hz[1:-1, None]) / (hz[1:-1] - hz[:-2])[:, None])
    db = 10 * np.log10(np.maximum(power @ filters.T, 1e-10))
    np.testing.assert_allclose(ours, np.maximum(db, db.max() - 80), atol=2e-3)


def test_reflect_index_equals_reflect_padding():
    x = torch.arange(7.0)[None, None]
    for length in [3, 5, 7]:
        index = reflect_index(torch.tensor([length]), 2, 7)
        expected = F.pad(x[..., :length], (2, 2), mode="reflect")
        assert torch.equal(x[0, 0][index[0, : length + 4]], expected[0, 0])


# ---------------------------------------------------------------- WavLM (Hugging Face layout)


@pytest.fixture(scope="module", params=["group", "layer"])
def wavlm_dir(request, tmp_path_factory) -> Path:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.WavLMConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, conv_dim=(16, 16),
        conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        tdnn_dim=(16, 16), tdnn_kernel=(3, 1), tdnn_dilation=(1, 1), xvector_output_dim=8, num_buckets=16,
        max_bucket_distance=32, feat_extract_norm=request.param, do_stable_layer_norm=request.param == "layer",
        initializer_range=0.5,
    )
    folder = tmp_path_factory.mktemp(f"wavlm_{request.param}")
    transformers.WavLMForXVector(config).save_pretrained(folder)
    transformers.Wav2Vec2FeatureExtractor(sampling_rate=16000, do_normalize=True).save_pretrained(folder)
    return folder


def test_wavlm_batched_equals_one_by_one_and_hf(wavlm_dir):
    from transformers import Wav2Vec2FeatureExtractor, WavLMForXVector

    from sdscore.features.speaker.wavlm import WavlmEncoder

    encoder = WavlmEncoder(wavlm_dir)
    waves = _noise_waves([1600, 800, 3000, 1234, 1600, 2222])
    batched, errors = encoder.embed_waveforms(waves)
    assert errors == [None] * len(waves) and batched.shape == (6, 8)
    alone = np.stack([encoder.embed_waveforms([w])[0][0] for w in waves])
    assert rel_err(batched, alone) < 1e-4
    model = WavLMForXVector.from_pretrained(wavlm_dir).eval()
    extractor = Wav2Vec2FeatureExtractor.from_pretrained(wavlm_dir)
    with torch.no_grad():
        plain = np.stack([model(torch.from_numpy(extractor(w, sampling_rate=16000, return_tensors="np")["input_values"]))
                          .embeddings[0].numpy() for w in waves])
        assert rel_err(batched, plain) < 1e-4
        if model.config.feat_extract_norm == "group":  # the padded batch HF would run differs: why ItemGroupNorm exists
            padded = extractor(waves, sampling_rate=16000, padding=True, return_attention_mask=True, return_tensors="pt")
            naive = model(padded["input_values"], attention_mask=padded["attention_mask"]).embeddings.numpy()
            assert rel_err(naive, plain) > 1e-3


def test_wavlm_errors(wavlm_dir, tmp_path):
    from sdscore.features.speaker.wavlm import WavlmEncoder

    _, errors = WavlmEncoder(wavlm_dir).embed_waveforms([np.zeros(20, np.float32), np.full(900, np.inf, np.float32)])
    assert errors == ["audio too short for WavLM: 20 samples", "audio holds NaN or Inf samples"]
    with pytest.raises(ModelError, match="no config.json"):
        WavlmEncoder(tmp_path)


# ---------------------------------------------------------------- SpeakerEmbedder and its cache


def _write_waves(folder: Path, waves) -> list[str]:
    import soundfile

    paths = []
    for i, wave in enumerate(waves):
        paths.append(str(folder / f"w{i}.wav"))
        soundfile.write(paths[-1], wave, 16000, subtype="FLOAT")
    return paths


def _count_calls(embedder: SpeakerEmbedder) -> list[int]:
    calls, inner = [], embedder.encoder.embed_waveforms
    embedder.encoder.embed_waveforms = lambda waves: (calls.append(len(waves)), inner(waves))[1]
    return calls


def test_embedder_caches_by_content(ecapa_dir, tmp_path):
    paths = _write_waves(tmp_path, _noise_waves([8000, 9000, 8000]))
    shutil.copy(paths[0], tmp_path / "copy.wav")
    cache = tmp_path / "cache"
    embedder = SpeakerEmbedder("ecapa", ecapa_dir, cache_dir=cache)
    calls = _count_calls(embedder)
    first = embedder.embed_files([*paths, paths[1], str(tmp_path / "copy.wav")])
    assert calls == [3] and embedder.computed == 3
    np.testing.assert_array_equal(first[0], first[4])
    np.testing.assert_array_equal(first[1], first[3])
    again = embedder.embed_files(paths)
    assert calls == [3]
    fresh = SpeakerEmbedder("ecapa", ecapa_dir, cache_dir=cache)
    fresh_calls = _count_calls(fresh)
    np.testing.assert_array_equal(fresh.embed_files(paths), again)
    assert fresh_calls == [] and fresh.computed == 0
    batch = load_many(paths)
    np.testing.assert_allclose(fresh.embed(batch), again, atol=1e-6)
    assert fresh_calls == [3]
    fresh.embed(batch)
    assert fresh_calls == [3]


def test_embedder_errors_per_file(ecapa_dir, tmp_path):
    paths = _write_waves(tmp_path, _noise_waves([8000, 50]))
    embedder = SpeakerEmbedder("ecapa", ecapa_dir)
    missing = str(tmp_path / "missing.wav")
    embeddings, errors = embedder.try_embed_files([paths[0], missing, paths[1]])
    assert errors[0] is None and not np.isnan(embeddings[0]).any()
    assert errors[1].startswith(f"{missing}: cannot read audio file") and np.isnan(embeddings[1]).all()
    assert errors[2] == f"{paths[1]}: audio too short for ECAPA: 1 frames, needs >= 5"
    with pytest.raises(AudioError, match="2 of 3 could not be embedded: .*missing.wav"):
        embedder.embed_files([paths[0], missing, paths[1]])
    data, offsets = pack(_noise_waves([8000]))
    with pytest.raises(ValueError, match="needs 16000 Hz audio, got 8000 Hz"):
        embedder.embed(AudioBatch(data, offsets, [None], 8000))
    with pytest.raises(AudioError, match="item 0: decode failed"):
        embedder.embed(AudioBatch(data[:0], np.zeros(2, np.int64), ["decode failed"], 16000))
    with pytest.raises(ValueError, match="unknown speaker embedder 'xvector'"):
        SpeakerEmbedder("xvector")
    with pytest.raises(ModelError, match="the ecapa embedder loads from a local folder"):
        SpeakerEmbedder("ecapa")



def test_embedder_chunks_with_read_ahead_equal_one_file_at_a_time(ecapa_dir, tmp_path, monkeypatch):
    """Ragged files (a missing one, a too-short one, a repeat) in chunks of 2 decoded ahead on the
    read-ahead thread give the rows of one-file chunks; no read-ahead thread is left afterwards."""
    import threading

    import sdscore.features.speaker.embedder as embedder_module
    from sdscore.features.batched_extraction import THREAD_NAME
    from sdscore.runtime.compute_budget import budget

    paths = _write_waves(tmp_path, _noise_waves([8000, 50, 12000, 3000, 9000, 16000, 4000]))
    missing = str(tmp_path / "missing.wav")
    files = [paths[0], missing, *paths[1:4], paths[0], *paths[4:]]
    results = {}
    for chunk in (1, 2):
        monkeypatch.setattr(embedder_module, "FILES_PER_CHUNK", chunk)
        embedder = SpeakerEmbedder("ecapa", ecapa_dir)
        calls = _count_calls(embedder)
        with budget(2):
            results[chunk] = embedder.try_embed_files(files)
        assert sum(calls) == 7 and max(calls) == chunk  # the 7 distinct readable files reach the encoder
        assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]
    (one, one_errors), (two, two_errors) = results[1], results[2]
    np.testing.assert_allclose(two, one, atol=1e-5)
    assert two_errors == one_errors
    assert one_errors[1].startswith(f"{missing}: cannot read audio file")
    assert one_errors[2] == f"{paths[1]}: audio too short for ECAPA: 1 frames, needs >= 5"
    assert [i for i, e in enumerate(one_errors) if e is not None] == [1, 2]
    np.testing.assert_array_equal(one[5], one[0])
