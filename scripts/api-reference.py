#!/usr/bin/env python3
"""Writes docs/api.md (to stdout) from the examples scripts/api-reference.sh collects: one
section per method of /openapi.json, in its order, with the method's summary, permission and
body limit, and a real request and reply, shortened (long strings cut, long lists to their
first items) so a reader sees the shape. tests/it/docs_api.rs checks every example against the
schemas on every run."""
import json, os, sys

d = sys.argv[1]
doc = json.load(open(os.path.join(d, "openapi.json")))
GROUPS = [
    ("Evidence and candidates", ("evidence.", "integration."), "candidate-flow.md"),
    ("Jobs and webhooks", ("job.", "webhook."), "jobs.md"),
    ("Events", ("event.",), "events.md"),
    ("Claims and resources", ("claim.", "resource."), "governed-path.md#governed-workspaces-and-claims"),
    ("Proposals", ("proposal.",), "governed-path.md#proposals"),
    ("Reviews, approvals and the policy", ("vote.", "security.", "human.", "decision.", "policy."), "governed-path.md#reviews-and-the-policy"),
    ("Validation, apply and transactions", ("patch.", "transaction."), "governed-path.md#validation-and-apply"),
]
MAX_STR, MAX_ITEMS = 160, 2


def short(v):
    if isinstance(v, str) and len(v) > MAX_STR:
        return v[:MAX_STR] + "..."
    if isinstance(v, list):
        return [short(x) for x in v[:MAX_ITEMS]]
    if isinstance(v, dict):
        return {k: short(x) for k, x in v.items()}
    return v


def size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


methods = [p[len("/api/v1/"):] for p in doc["paths"] if p.startswith("/api/v1/") and "post" in doc["paths"][p]]
out = ["# API reference", "",
       "Every method is `POST /api/v1/<method>` with a JSON object body and `Authorization: Bearer",
       "<token>`; the answer is JSON (the [daemon](daemon.md) has the conventions: body limits,",
       "errors and their codes, idempotency keys, request ids, actors). Each section gives the",
       "method's permission and body limit and a real request and its reply, as the test suite",
       "made them (`scripts/api-reference.sh` regenerates this page; long strings and lists are",
       "shortened). `/openapi.json` has every field's schema and bound; the test suite checks each",
       "example here against it. The flow pages explain what each method does.", ""]
missing = []
for title, prefixes, page in GROUPS:
    group = [m for m in methods if m.startswith(prefixes)]
    if not group:
        continue
    out += [f"## {title}", "", f"What these do and why: [{page.split('#')[0]}]({page}).", ""]
    for m in group:
        op = doc["paths"][f"/api/v1/{m}"]["post"]
        out += [f"### `{m}`", ""]
        line = op.get("summary", "")
        out += [f"{line}. Permission: {op.get('x-airlock-permission', '?')}. Body at most {size(op.get('x-airlock-body-limit'))}."]
        if op.get("x-airlock-alias-of"):
            out += [f"Another name of `{op['x-airlock-alias-of']}`: the same parameters, checks and answer."]
        if op.get("x-airlock-agent-tool"):
            out += ["Also an MCP tool."]
        out += [""]
        path = os.path.join(d, f"{m}.json")
        if not os.path.exists(path):
            missing.append(m)
            continue
        ex = json.load(open(path))
        out += ["Request:", "", "```json", json.dumps(short(ex["request"]), indent=2), "```", "",
                "Reply:", "", "```json", json.dumps(short(ex["reply"]), indent=2), "```", ""]
rest = [m for m in methods if not any(m.startswith(p) for _, ps, _ in GROUPS for p in ps)]
if rest:
    sys.exit(f"methods in no group: {rest}")
if missing:
    sys.exit(f"no example for: {missing}")
print("\n".join(out))
