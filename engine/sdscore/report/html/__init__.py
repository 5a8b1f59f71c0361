"""The self-contained HTML report's building blocks (Jinja2 templates, inline CSS/JS/images/audio): sections
and their elements, audio embedding, items found in a manifest, the view context, and the HTML shell.
They receive a protocol's view and its data and import no protocol; the document that builds each
protocol's section is sdscore.report_document."""

from sdscore.report.html.document import read_metrics, render_report, write_report
from sdscore.report.html.elements import Section
from sdscore.report.html.embedding import CLIP_LIMIT, REPORT_LIMIT, AudioEmbedder

__all__ = [
    "CLIP_LIMIT",
    "REPORT_LIMIT",
    "AudioEmbedder",
    "Section",
    "read_metrics",
    "render_report",
    "write_report",
]
