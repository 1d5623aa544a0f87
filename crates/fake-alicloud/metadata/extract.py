#!/usr/bin/env python3
"""Regenerates ecs-2014-05-26.json from Alibaba Cloud's full OpenAPI metadata
of Ecs 2014-05-26 (api-docs.json, about 2.7 MB), given as the first argument.

The excerpt keeps what the fake needs to stay honest: for RunInstances,
DescribeInstances and DeleteInstance every parameter (with the properties of
repeat lists and flat objects) and every documented error code by HTTP status;
the throttling codes the product documents (gateway codes, listed on other
actions) with the actions that list them; and the regional endpoints.
"""
import json
import sys

ACTIONS = ["RunInstances", "DescribeInstances", "DeleteInstance"]


def main(path):
    d = json.load(open(path))
    out = {
        "_source": "Excerpt of Alibaba Cloud's OpenAPI metadata for Ecs 2014-05-26 "
        "(api-docs.json, snapshot of 2024-06-24): the three actions the driver calls, "
        "each with every parameter (repeat lists and flat objects with their properties) "
        "and every error code it documents, the product-wide throttling codes with the "
        "actions that list them, and the regional endpoints. Regenerate with "
        "crates/fake-alicloud/metadata/extract.py.",
        "info": d["info"],
        "apis": {},
        "gatewayErrorCodes": {},
        "endpoints": d["endpoints"],
    }
    for a in ACTIONS:
        api = d["apis"][a]
        params = []
        for p in api["parameters"]:
            s = p.get("schema", {})
            e = {"name": p["name"], "style": p.get("style", "simple"), "type": s.get("type")}
            props = None
            items = s.get("items")
            if s.get("type") == "array" and isinstance(items, dict) and items.get("properties"):
                props = sorted(items["properties"].keys())
            elif s.get("type") == "object" and s.get("properties"):
                props = sorted(s["properties"].keys())
            if props:
                e["properties"] = props
            if s.get("maximum") is not None:
                e["maximum"] = s["maximum"]
            if s.get("maxItems") is not None:
                e["maxItems"] = s["maxItems"]
            params.append(e)
        out["apis"][a] = {
            "parameters": params,
            "errorCodes": {
                k: sorted({x["errorCode"] for x in v})
                for k, v in api.get("errorCodes", {}).items()
            },
        }
    gw = {}
    for name, api in d["apis"].items():
        for status, codes in api.get("errorCodes", {}).items():
            for e in codes:
                if e["errorCode"].startswith("Throttling"):
                    gw.setdefault(e["errorCode"], {}).setdefault(status, set()).add(name)
    out["gatewayErrorCodes"] = {
        c: {st: sorted(n) for st, n in v.items()} for c, v in sorted(gw.items())
    }
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
