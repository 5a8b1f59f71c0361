"""The values the judge Scorer's settings may take, light enough for `sdscore --help`."""

#: the blueprints' pitch trackers (BlueprintBuilder's ``pitch``; its PITCH_METHODS, named here so that the
#: options parse without importing the feature stack)
PITCH_TRACKERS = ("aubio", "yin")
