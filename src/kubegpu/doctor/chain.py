"""Running checks in chain order, so that a broken link blocks the checks that depend on it.

Each ``Check`` names the checks it needs. When one of those failed (or was itself blocked) the check
is not run and is reported ``skip`` with "blocked by <id>", naming the first broken link rather than an
intermediate one. A check that raises is reported as a failure of that check, never as a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kubegpu.doctor.finding import CheckId, Finding, Layer, Outcome, Status
from kubegpu.errors import ProbeFailed

__all__ = ["Check", "Report", "run_checks"]

C = TypeVar("C")


@dataclass(frozen=True, kw_only=True)
class Check(Generic[C]):
    """One small check: a stable id, its layer, the checks it depends on, and the function."""

    id: CheckId
    layer: Layer
    needs: tuple[CheckId, ...]
    run: Callable[[C], Outcome]


@dataclass(frozen=True, kw_only=True)
class Report:
    """All findings of one doctor run, in chain order, with the time it took."""

    findings: tuple[Finding, ...]
    elapsed_s: float = 0.0

    @property
    def first_broken(self) -> Finding | None:
        """The first failed finding in chain order: the link to fix first."""
        return next((f for f in self.findings if f.status is Status.FAIL), None)

    @property
    def exit_code(self) -> int:
        return 1 if self.first_broken is not None else 0

    def by_id(self, check_id: str) -> Finding:
        for finding in self.findings:
            if finding.id == check_id:
                return finding
        raise KeyError(check_id)

    def __add__(self, other: Report) -> Report:
        return Report(findings=self.findings + other.findings, elapsed_s=self.elapsed_s + other.elapsed_s)

    def to_json(self) -> dict[str, object]:
        return {"findings": [f.to_json() for f in self.findings]}


def run_checks(
    checks: Sequence[Check[C]],
    context: C,
    *,
    prior: Sequence[Finding] = (),
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    """Run ``checks`` in order against ``context``; ``prior`` findings may satisfy or block ``needs``."""
    start = clock()
    blocker: dict[str, str | None] = {}
    for finding in prior:
        blocker[finding.id] = _root_blocker(finding)
    findings: list[Finding] = []
    for check in checks:
        root = next((blocker[n] for n in check.needs if blocker.get(n)), None)
        if root is not None:
            outcome = Outcome(status=Status.SKIP, summary=f"blocked by {root}")
        else:
            try:
                outcome = check.run(context)
            except ProbeFailed as exc:
                outcome = Outcome(status=Status.FAIL, summary=f"could not read what this check needs: {exc}")
            except Exception as exc:  # a bug in one check must not hide the others
                outcome = Outcome(
                    status=Status.FAIL,
                    summary=f"the check itself failed: {type(exc).__name__}: {exc}",
                    fix="this is a kubegpu bug; please report it with the evidence above",
                )
        finding = Finding(
            id=check.id,
            layer=check.layer,
            status=outcome.status,
            summary=outcome.summary,
            evidence=outcome.evidence,
            fix=outcome.fix,
        )
        findings.append(finding)
        if finding.status is Status.FAIL:
            blocker[check.id] = check.id
        elif finding.status is Status.SKIP:
            blocker[check.id] = root if root is not None else check.id
        else:
            blocker[check.id] = None
    return Report(findings=tuple(findings), elapsed_s=clock() - start)


def _root_blocker(finding: Finding) -> str | None:
    if finding.status is Status.FAIL:
        return finding.id
    if finding.status is Status.SKIP:
        prefix = "blocked by "
        return finding.summary[len(prefix) :] if finding.summary.startswith(prefix) else finding.id
    return None
