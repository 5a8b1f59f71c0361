"""The per-row audio duration cap every `sdscore score` protocol shares, in a module that imports
nothing: the protocols' settings (and so `sdscore --help`) read it without loading the audio stack
(`sdscore.audio` brings numpy, storage and the corpus readers of embedded clips)."""

#: seconds; a longer file fails its row (0 = no cap); SDSCORE_MAX_AUDIO_SECONDS overrides it
DEFAULT_MAX_AUDIO_SECONDS = 600.0
#: --max-audio-seconds help, shared by every `sdscore score` protocol
MAX_AUDIO_SECONDS_HELP = (f"refuse (per row) audio files longer than this many seconds (default "
                          f"{DEFAULT_MAX_AUDIO_SECONDS:g}; 0 = no cap)")
