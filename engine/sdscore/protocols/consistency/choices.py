"""The values the consistency Scorers' settings may take, light enough for `sdscore --help`."""

#: Default threshold per method (SpeakerSleuth §5.1). "centroid" averages unit-normalised embeddings
#: (so its discrimination equals pairwise's, as in the paper's Table 2); "centroid-raw" averages the
#: raw embeddings, so turns with larger embedding norms pull it (this package's behaviour before).
METHODS = {"pairwise": 0.4, "centroid": 0.3, "centroid-raw": 0.3, "reference": 0.4}
#: what the LALM judge is asked (auto: each row's own task)
LALM_TASKS = ("auto", "detection", "localization", "discrimination", "ranking")
#: option orders the LALM judge is asked: one seeded random order per row, or every order (position bias)
PERMUTATIONS = ("one", "all")
