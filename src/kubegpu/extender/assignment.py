"""The GPU assignment the extender writes on a pod at bind: see ``kubegpu.model.assignment`` (moved there,
below the agent and the extender, so the node agent reads the same format)."""

from kubegpu.model.assignment import ANNOTATION, FORMAT_VERSION, Assignment, assignment_of, decode, encode

__all__ = ["ANNOTATION", "FORMAT_VERSION", "Assignment", "assignment_of", "decode", "encode"]
