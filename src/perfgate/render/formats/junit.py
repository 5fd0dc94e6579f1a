"""``junit``: the run's judged figures as JUnit XML, one test case per figure.

CI systems that read JUnit (Jenkins, GitLab, Azure) then list each figure with its
verdict: a failed figure (regressed, too noisy, missing, creep, untrusted) is a failure
whose message is the figure's verdict line; a figure without a baseline is skipped; each
case carries the measured value, baseline and limit as properties. A failed correctness
check is a failure of its own.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from perfgate.render.formats import Context, Format, register
from perfgate.results.run import RunRecord


def junit_report(run: RunRecord, context: Context) -> str:
    """The run as one JUnit ``testsuite`` of its checks and correctness failures."""
    profile = str(run.profile.get("name", "profile"))
    failed = [c for c in run.checks if c.failed]
    skipped = [c for c in run.checks if c.verdict == "no-baseline"]
    suite = ET.Element(
        "testsuite",
        name=f"perfgate.{profile}",
        tests=str(len(run.checks) + len(run.correctness_failures)),
        failures=str(len(failed) + len(run.correctness_failures)),
        skipped=str(len(skipped)),
        timestamp=run.created_at,
    )
    for check in run.checks:
        measurement, _, figure = check.key.partition(".")
        case = ET.SubElement(suite, "testcase", classname=f"{profile}.{measurement}", name=figure)
        properties = ET.SubElement(case, "properties")
        for field in ("measured", "baseline", "limit"):
            value = getattr(check, field)
            if value is not None:
                ET.SubElement(properties, "property", name=field, value=f"{value:.6g}")
        ET.SubElement(properties, "property", name="verdict", value=check.verdict)
        if check.failed:
            failure = ET.SubElement(case, "failure", message=check.message(), type=check.verdict)
            failure.text = check.why
        elif check.verdict == "no-baseline":
            ET.SubElement(case, "skipped", message="no baseline figure to judge it against")
    for node in run.correctness_failures:
        case = ET.SubElement(suite, "testcase", classname=f"{profile}.correctness", name=node)
        ET.SubElement(case, "failure", message=f"correctness check failed: {node}")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


register(
    Format(
        "junit",
        "the judged figures as JUnit XML, one test case per figure",
        junit_report,
        suffix=".xml",
    )
)
