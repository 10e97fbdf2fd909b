#!/usr/bin/env python3
"""A KRM function in python3 (standard library only).

Adds the labels of its functionConfig (a ConfigMap: every data entry is a
label) to metadata.labels of every item. It reads ResourceLists in JSON,
which KRM allows, and refuses anything else with an error result.
"""
import json
import sys


def fail(rl, message):
    print("set-label: " + message, file=sys.stderr)
    rl.setdefault("results", []).append({"message": message, "severity": "error"})
    json.dump(rl, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 1


def main():
    raw = sys.stdin.read()
    try:
        rl = json.loads(raw)
    except ValueError as e:
        return fail({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
                     "items": []}, "the input is not a JSON ResourceList: %s" % e)
    if not isinstance(rl, dict) or rl.get("kind") != "ResourceList":
        return fail({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
                     "items": []}, "the input is not a ResourceList")
    labels = (rl.get("functionConfig") or {}).get("data")
    if not isinstance(labels, dict) or not labels:
        return fail(rl, "functionConfig.data must list the labels to set")
    items = rl.get("items") or []
    for item in items:
        meta = item.setdefault("metadata", {})
        meta.setdefault("labels", {}).update({k: str(v) for k, v in labels.items()})
    print("set-label: labelled %d items with %d labels" % (len(items), len(labels)),
          file=sys.stderr)
    json.dump(rl, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
