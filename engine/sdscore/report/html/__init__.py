"""The self-contained HTML report of protocol evaluations (Jinja2 templates, inline CSS/JS/images/audio)."""

from sdscore.report.html.document import (
    VIEWS,
    protocol_section,
    read_metrics,
    render_report,
    report_files,
    write_report,
)
from sdscore.report.html.elements import Section
from sdscore.report.html.embedding import CLIP_LIMIT, REPORT_LIMIT, AudioEmbedder

__all__ = [
    "CLIP_LIMIT",
    "REPORT_LIMIT",
    "VIEWS",
    "AudioEmbedder",
    "Section",
    "protocol_section",
    "read_metrics",
    "render_report",
    "report_files",
    "write_report",
]
