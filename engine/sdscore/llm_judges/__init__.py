"""LLM and audio-LLM judges below the protocols: an OpenAI-compatible chat client (cache, retries,
cost, deadlines, key redaction), audio requests as input_audio parts, reply parsers and prompt files.

Protocols that ask a model for a verdict (judge, consistency, ...) build on this package; they never
import each other.
"""

from sdscore.llm_judges.client import ChatClient, ChatResult, Price, RetryPolicy, Totals, Usage
from sdscore.llm_judges.reply_error import ReplyError

__all__ = ["ChatClient", "ChatResult", "Price", "ReplyError", "RetryPolicy", "Totals", "Usage"]
