"""ReplyError: a judge's reply that does not validate, with the reply's text kept for the results."""

from __future__ import annotations

from sdscore.errors import JudgeError


class ReplyError(JudgeError):
    """A judge reply that a parser refused; ``raw`` is the reply's text (None when there was none).

    The chat client asks again on it, and the last one's raw text travels into the final error so a
    row that fails keeps what the model actually said.
    """

    def __init__(self, message: str, raw: str | None = None):
        super().__init__(message)
        self.raw = raw
