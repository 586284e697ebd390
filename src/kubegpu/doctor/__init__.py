"""``kubegpu doctor``: walk the chain driver → runtime → device plugin → scheduler → pod, name the
first broken link, with the evidence seen and the fix.

Checks are small functions over injectable probes (``HostProbe`` for a host root, ``ClusterApi`` for
the Kubernetes API), run in chain order by ``run_checks``; see ``docs/doctor.md``.
"""

from kubegpu.doctor.chain import Check, Report, run_checks
from kubegpu.doctor.clusterprobe import ClusterApi, LiveCluster, RecordedCluster
from kubegpu.doctor.finding import CheckId, Finding, Layer, Status
from kubegpu.doctor.hostprobe import HostProbe
from kubegpu.doctor.reports import cluster_report, full_report, node_report, pod_report
from kubegpu.errors import ClusterUnreachable

__all__ = [
    "Check",
    "CheckId",
    "ClusterApi",
    "ClusterUnreachable",
    "Finding",
    "HostProbe",
    "Layer",
    "LiveCluster",
    "RecordedCluster",
    "Report",
    "Status",
    "cluster_report",
    "full_report",
    "node_report",
    "pod_report",
    "run_checks",
]
