"""Exception hierarchy: every error sdscore raises on purpose is an SdscoreError."""

from __future__ import annotations


class SdscoreError(Exception):
    """Base class for errors raised by sdscore on bad input or missing components."""


class AudioError(SdscoreError):
    """An audio file could not be read: the message names the file and the problem."""


class ManifestError(SdscoreError):
    """A manifest is malformed: the message names the file, the row and the column."""


class ModelError(SdscoreError):
    """A model directory is missing, incomplete or incompatible."""


class JudgeError(SdscoreError):
    """A judge call failed or its reply did not validate."""


class MissingDependencyError(SdscoreError, ImportError):
    """An optional dependency is not installed; the message says how to install it."""
