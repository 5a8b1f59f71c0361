"""LLM and audio-LLM judges below the protocols: an OpenAI-compatible chat client (cache, retries,
cost, deadlines, key redaction), audio requests as input_audio parts, reply parsers and prompt files.

Protocols that ask a model for a verdict (judge, consistency, ...) build on this package; they never
import each other. Names are imported from their modules on first use (lazy_exports).
"""

from sdscore.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".client": ("ChatClient", "ChatResult", "Price", "RetryPolicy", "Totals", "Usage"),
    ".reply_error": ("ReplyError",),
})
