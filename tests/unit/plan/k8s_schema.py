"""Offline check that emitted Kubernetes objects use only real API fields.

Walks a manifest against the official Python client's generated models (``openapi_types`` and
``attribute_map``, produced from the Kubernetes OpenAPI spec): every key must be a field of the
type at that path, and scalars must have the field's JSON type. Server-side dry-run against a real
API server comes with the e2e rig; this catches misspelt or invented fields without one.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client as kc

KINDS = {
    ("v1", "Pod"): "V1Pod",
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ResourceQuota"): "V1ResourceQuota",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "LimitRange"): "V1LimitRange",
    ("scheduling.k8s.io/v1", "PriorityClass"): "V1PriorityClass",
}

_SCALARS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}
_LIST = re.compile(r"^(?:list|List)\[(.+)\]$")
_DICT = re.compile(r"^(?:dict|Dict)\((?:str), (.+)\)$|^Dict\[str, (.+)\]$")


def problems(obj: Any, type_name: str, path: str = "") -> list[str]:
    """Every place where ``obj`` is not a valid ``type_name`` (a client model name or type string)."""
    if type_name == "object":
        return []
    if type_name in _SCALARS:
        ok = isinstance(obj, _SCALARS[type_name]) and not (type_name != "bool" and isinstance(obj, bool))
        return [] if ok else [f"{path}: {obj!r} is not a {type_name}"]
    if m := _LIST.match(type_name):
        if not isinstance(obj, list):
            return [f"{path}: expected a list"]
        return [p for i, item in enumerate(obj) for p in problems(item, m.group(1), f"{path}[{i}]")]
    if m := _DICT.match(type_name):
        if not isinstance(obj, dict):
            return [f"{path}: expected a map"]
        inner = m.group(1) or m.group(2)
        return [p for k, v in obj.items() for p in problems(v, inner, f"{path}.{k}")]
    cls = getattr(kc, type_name)
    if not isinstance(obj, dict):
        return [f"{path}: expected a {type_name} object"]
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    found: list[str] = []
    for key, value in obj.items():
        if key not in by_json:
            found.append(f"{path}.{key}: not a field of {type_name}")
            continue
        found.extend(problems(value, cls.openapi_types[by_json[key]], f"{path}.{key}"))
    return found


def manifest_problems(doc: dict[str, Any]) -> list[str]:
    """Problems of one top-level manifest, typed by its apiVersion and kind."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in KINDS:
        return [f"unknown apiVersion/kind {key}"]
    return problems(doc, KINDS[key], str(key[1]))
