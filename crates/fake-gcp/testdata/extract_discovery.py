#!/usr/bin/env python3
"""Extracts the part of the Compute Engine v1 discovery document that the fake
serves: the schemas reachable from Instance, InstanceList, Operation and the
request bodies of the hot-update calls (names, types, formats and references
only, no descriptions) and the nine methods.

Source: the discovery document that Google's API client for Python ships,
PyPI package google-api-python-client, file
googleapiclient/discovery_cache/documents/compute.v1.json.

    pip download --no-deps google-api-python-client==2.202.0
    unzip -o google_api_python_client-2.202.0-py3-none-any.whl \
        googleapiclient/discovery_cache/documents/compute.v1.json
    python3 extract_discovery.py googleapiclient/discovery_cache/documents/compute.v1.json \
        > compute.v1.subset.json
"""
import json
import sys

KEEP = ("type", "$ref", "format", "enum")


def slim(prop):
    out = {k: prop[k] for k in KEEP if k in prop}
    if "items" in prop:
        out["items"] = slim(prop["items"])
    if "additionalProperties" in prop:
        out["additionalProperties"] = slim(prop["additionalProperties"])
    if "properties" in prop:
        out["properties"] = {k: slim(v) for k, v in prop["properties"].items()}
    return out


def refs(prop, acc):
    if "$ref" in prop:
        acc.add(prop["$ref"])
    for key in ("items", "additionalProperties"):
        if key in prop:
            refs(prop[key], acc)
    for v in prop.get("properties", {}).values():
        refs(v, acc)


def main():
    doc = json.load(open(sys.argv[1]))
    schemas = doc["schemas"]
    todo = ["Instance", "InstanceList", "Operation",
            "InstancesSetLabelsRequest", "DisksResizeRequest"]
    seen = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = slim(schemas[name])
        acc = set()
        refs(schemas[name], acc)
        todo.extend(sorted(acc - set(seen)))
    methods = {
        "instances.insert": doc["resources"]["instances"]["methods"]["insert"],
        "instances.get": doc["resources"]["instances"]["methods"]["get"],
        "instances.list": doc["resources"]["instances"]["methods"]["list"],
        "instances.delete": doc["resources"]["instances"]["methods"]["delete"],
        "zoneOperations.get": doc["resources"]["zoneOperations"]["methods"]["get"],
        "instances.setLabels": doc["resources"]["instances"]["methods"]["setLabels"],
        "instances.setTags": doc["resources"]["instances"]["methods"]["setTags"],
        "instances.setMetadata": doc["resources"]["instances"]["methods"]["setMetadata"],
        "disks.resize": doc["resources"]["disks"]["methods"]["resize"],
    }
    out = {
        "source": "google-api-python-client 2.202.0, googleapiclient/discovery_cache/documents/compute.v1.json",
        "revision": doc["revision"],
        "servicePath": doc["servicePath"],
        "methods": {
            k: {"httpMethod": m["httpMethod"], "path": m["path"],
                "parameters": sorted(m.get("parameters", {}).keys()),
                "request": m.get("request", {}).get("$ref"),
                "response": m.get("response", {}).get("$ref")}
            for k, m in methods.items()
        },
        "schemas": dict(sorted(seen.items())),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
