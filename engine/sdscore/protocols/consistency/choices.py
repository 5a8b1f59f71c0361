"""The values the consistency Scorers' settings may take, light enough for `sdscore --help`."""

#: Default threshold per method (SpeakerSleuth §5.1). "centroid" averages unit-normalised embeddings
#: (so its discrimination equals pairwise's, as in the paper's Table 2); "centroid-raw" averages the
#: raw embeddings, so turns with larger embedding norms pull it (this package's behaviour before).
METHODS = {"pairwise": 0.4, "centroid": 0.3, "centroid-raw": 0.3, "reference": 0.4}
#: Defaults that depend on the embedder, where the paper's do not fit it. GE2E's cosines run high:
#: on real voices (tests/data/real/voices, clips halved, split by speaker) different speakers
#: score a median 0.46-0.48 and 83 % of their pairs reach 0.4, so the paper's 0.4 flags almost
#: nothing. 0.56 is the equal-error point of same- vs different-speaker cosines on the tuning
#: half (13 speakers: FRR 0.145, FAR 0.142); on the held-out half (22 speakers) it gives FRR
#: 0.173, FAR 0.178 (tests/test_consistency_ge2e_threshold.py).
EMBEDDER_THRESHOLDS = {("ge2e", "pairwise"): 0.56, ("ge2e", "reference"): 0.56}
#: what the LALM judge is asked (auto: each row's own task)
LALM_TASKS = ("auto", "detection", "localization", "discrimination", "ranking")
#: option orders the LALM judge is asked: one seeded random order per row, or every order (position bias)
PERMUTATIONS = ("one", "all")
