"""``markdown``: the run's summary, as written to ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

from perfgate.render.formats import Context, Format, register
from perfgate.render.markdown import markdown_summary
from perfgate.results.run import RunRecord


def markdown_report(run: RunRecord, context: Context) -> str:
    """:func:`~perfgate.render.markdown.markdown_summary` of the run."""
    return markdown_summary(run, run_json=context.run_json, artifact_url=context.artifact_url)


register(
    Format(
        "markdown",
        "the Markdown summary (as written to $GITHUB_STEP_SUMMARY)",
        markdown_report,
        suffix=".md",
    )
)
