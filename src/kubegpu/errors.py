"""One exception hierarchy for everything kubegpu tells a user went wrong.

Every message is written for the person at the terminal: it names the file, line, key or device that
is wrong and, where one exists, what to do about it. The command line turns a ``KubegpuError`` into a
single line on stderr and the exit code the class carries; anything else reaching the user is a bug.

::

    KubegpuError                  exit 1  base class
    ├── InputError                exit 2  bad user input (flags, files, specs, captures)
    │   ├── SpecError                     a node spec or builtin name is wrong
    │   ├── TopologyParseError            an ``nvidia-smi topo -m`` capture cannot be read
    │   ├── ConfigError                   an agent/plugin config file or value is wrong
    │   └── TraceError                    a cluster trace CSV is wrong
    ├── AllocationError           exit 1  a device request cannot be satisfied
    ├── DeviceRequestError        exit 1  kubelet asked the device plugin for something it refuses
    │                                     (``problem``: a ``DeviceRequestProblem``)
    ├── MigLayoutError            exit 1  a MIG layout breaks the placement rules
    ├── MigApplyError             exit 1  the GPUs refused a MIG layout (NVML, the simulated state file)
    ├── MpsDaemonError            exit 1  an MPS control daemon cannot be started, reached or stopped
    ├── RegistrationFailed        exit 1  kubelet is unreachable, silent, or refused a registration
    ├── SourceError               exit 1  a GPU source (NVML, the host) cannot be read
    ├── UnknownGpuError           exit 1  a health event names a GPU this node does not have
    ├── PodResourcesUnavailable   exit 1  kubelet's PodResources API cannot be read (socket, rate limit)
    ├── ApiServerError            exit 1  an API-server call failed (``status``: HTTP code, 0 unreachable)
    ├── ClaimError                exit 1  the DRA driver cannot prepare a ResourceClaim (the reason
    │                                     reaches the pod's events through kubelet)
    ├── PlacementError            exit 1  the scheduler extender cannot place or bind a pod (its ask, a node)
    ├── ReplayError               exit 1  `sim kube` cannot go on (no scheduler, nodes not Ready)
    └── ProbeFailed               exit 1  a doctor probe cannot read what a check needs
        └── ClusterUnreachable            the API server cannot be reached, or the credentials fail

``DeviceRequestProblem`` (an enum, not an exception) says why a device request was refused; the
device plugin's gRPC servicer maps each problem to its status code.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "AllocationError",
    "ApiServerError",
    "ClaimError",
    "ClusterUnreachable",
    "ConfigError",
    "DeviceRequestError",
    "DeviceRequestProblem",
    "InputError",
    "KubegpuError",
    "MigApplyError",
    "MigLayoutError",
    "MpsDaemonError",
    "PlacementError",
    "PodResourcesUnavailable",
    "ProbeFailed",
    "RegistrationFailed",
    "ReplayError",
    "SourceError",
    "SpecError",
    "TopologyParseError",
    "TraceError",
    "UnknownGpuError",
]


class KubegpuError(Exception):
    """Base of every error kubegpu raises on purpose; ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1


class InputError(KubegpuError):
    """The user gave input that cannot be used: a flag, a file, a value."""

    exit_code = 2


class SpecError(InputError):
    """A node spec (YAML file or ``builtin:NAME``) is malformed or inconsistent."""


class TopologyParseError(InputError):
    """An ``nvidia-smi topo -m`` capture cannot be parsed; the message names the line."""


class ConfigError(InputError):
    """A configuration file or value is invalid; the message names the key path and allowed values."""


class TraceError(InputError):
    """A cluster trace file is malformed; the message names file, line and column."""


class AllocationError(KubegpuError):
    """A device request cannot be satisfied (not enough devices, unknown must-include devices...)."""


class DeviceRequestProblem(Enum):
    """Why the device plugin refused a request from kubelet."""

    EMPTY = "empty"  # the request names no devices, or has no container requests
    UNKNOWN_DEVICE = "unknown-device"  # a device ID this resource does not advertise
    DUPLICATE_DEVICE = "duplicate-device"  # one device ID named twice
    UNHEALTHY = "unhealthy"  # a device that is Unhealthy now
    TOO_MANY_SHARED = "too-many-shared"  # more than one replica of a shared resource
    NO_SHARE = "no-share"  # kubegpu.io/gpu-milli: no pod on the node waits for a share of that size


class DeviceRequestError(KubegpuError):
    """A request kubelet sent cannot be honoured; ``str()`` is the message kubelet shows the user.

    ``problem`` says why; the gRPC servicer turns it into the status code kubelet receives.
    """

    def __init__(self, problem: DeviceRequestProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


class MigLayoutError(KubegpuError):
    """A MIG layout breaks the placement rules; the message says which profile and why."""


class MigApplyError(KubegpuError):
    """Applying a valid MIG layout failed on the GPUs; the message names the GPU and the step."""


class MpsDaemonError(KubegpuError):
    """An MPS control daemon (``nvidia-cuda-mps-control``) cannot be started, reached or stopped."""


class RegistrationFailed(KubegpuError):
    """kubelet was not reachable, did not answer, or refused the registration; the message says which."""


class SourceError(KubegpuError):
    """A source of GPUs (NVML, the host) failed in a way the user must act on."""


class UnknownGpuError(KubegpuError):
    """A health event (NVML, a fault file) names a GPU index or UUID this node does not have."""


class PodResourcesUnavailable(KubegpuError):
    """kubelet's PodResources API did not answer (no socket, timeout, rate limit); says which and where."""


class ApiServerError(KubegpuError):
    """An API-server call of the agent failed; ``status`` is the HTTP code (0: not reachable)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ClaimError(KubegpuError):
    """The DRA driver cannot prepare a ResourceClaim: not allocated, replaced, or naming a device this
    node does not publish. kubelet shows the message in the pod's ``FailedPrepareDynamicResources`` event."""


class PlacementError(KubegpuError):
    """The scheduler extender cannot place or bind a pod: a GPU ask no node can meet, no room left."""


class ReplayError(KubegpuError):
    """`kubegpu sim kube` cannot go on: no scheduler places the pods, the kwok nodes never get Ready."""


class ProbeFailed(KubegpuError):
    """A doctor probe could not read what a check needs (API gone mid-run, ...); the check reports fail."""


class ClusterUnreachable(ProbeFailed):
    """The API server cannot be reached or the credentials do not work; the message says which."""
