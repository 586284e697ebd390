"""The chain runner: order, blocking by the first broken link, and no traceback from a broken check."""

from __future__ import annotations

from kubegpu.doctor.chain import Check, run_checks
from kubegpu.doctor.finding import CheckId, Layer, Outcome, Status, fail, ok
from kubegpu.errors import ProbeFailed


def check(name: str, outcome: Outcome | Exception, *needs: str) -> Check[None]:
    def run(_: None) -> Outcome:
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return Check(id=CheckId(name), layer=Layer.HOST, needs=tuple(CheckId(n) for n in needs), run=run)


def test_dependents_of_a_failed_check_are_skipped_naming_the_first_broken_link() -> None:
    report = run_checks(
        [
            check("a", ok("fine")),
            check("b", fail("broken", fix="do x")),
            check("c", ok("never run"), "b"),
            check("d", ok("never run"), "c"),
            check("e", ok("independent"), "a"),
        ],
        None,
    )
    assert [f.status for f in report.findings] == [
        Status.OK,
        Status.FAIL,
        Status.SKIP,
        Status.SKIP,
        Status.OK,
    ]
    assert report.by_id("c").summary == "blocked by b"
    assert report.by_id("d").summary == "blocked by b"  # the root, not the intermediate link
    assert report.first_broken is not None and report.first_broken.id == "b"
    assert report.exit_code == 1


def test_a_crashing_check_is_reported_as_a_failure_not_a_traceback() -> None:
    report = run_checks(
        [check("a", KeyError("spec")), check("b", ProbeFailed("API went away")), check("c", ok("x"))], None
    )
    assert report.by_id("a").status is Status.FAIL and "KeyError" in report.by_id("a").summary
    assert report.by_id("b").status is Status.FAIL and "API went away" in report.by_id("b").summary
    assert report.by_id("c").status is Status.OK


def test_prior_findings_gate_later_checks() -> None:
    first = run_checks([check("api", fail("down"))], None)
    later = run_checks([check("pod", ok("x"), "api")], None, prior=first.findings)
    assert later.by_id("pod").summary == "blocked by api"


def test_json_shape_is_exactly_the_documented_one() -> None:
    report = run_checks([check("a", fail("broken", fix="do x"))], None)
    assert report.to_json() == {
        "findings": [
            {"id": "a", "layer": "host", "status": "fail", "summary": "broken", "evidence": [], "fix": "do x"}
        ]
    }
