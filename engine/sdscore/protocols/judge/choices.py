"""The values the judge Scorer's settings may take, light enough for `sdscore --help`."""

#: the rules fusing C/VQ/P labels into an overall one (metrics.fusion.FUSION_RULES, named here so that the
#: options parse without importing numpy; a test checks the two agree)
FUSIONS = ("speakbench", "speakbench-paper", "s2sarena", "majority")

#: the blueprints' pitch trackers (BlueprintBuilder's ``pitch``; its PITCH_METHODS, named here so that the
#: options parse without importing the feature stack)
PITCH_TRACKERS = ("aubio", "yin")
