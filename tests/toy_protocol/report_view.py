"""The toy protocol's report section: its headline and its failed clips with their audio."""

from sdscore.report.html.items import failed_items
from sdscore.report.html.elements import metric
from sdscore.report.html.view_context import ViewContext, headline_row


def build(ctx: ViewContext):
    rows = [headline_row(name, metric(ctx.source, ctx.metrics, (name,))) for name in ("n", "failed", "mean_score")]
    frame = ctx.results[0][1]
    return ctx.headline(rows), [failed_items(ctx.finders[0], frame, lambda row: [("words", str(row.get("words")))])]


def clip_paths(row: dict):
    return [("clip", row.get("audio_path"))]
