"""Seeds a server for the schemathesis run and prints the ids as shell assignments, so that
operations on one resource reach it rather than answer 404 (schemathesis.toml binds the path
parameters to them): two employees, a DRAFT run with its payouts, a run being paid (its job),
a webhook endpoint with a delivery, a spare API key to rotate and revoke, an agent session and
the approval its execute of the DRAFT run asks for, and a wallet change (by another key) whose
hold can be lifted.

    python seed.py BASE_URL API_KEY
"""

import json
import sys
import urllib.request
import uuid

BASE, KEY = sys.argv[1].rstrip("/"), sys.argv[2]


def call(method, path, body=None, key=KEY):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{BASE}/api/v1{path}", data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    if method != "GET":
        request.add_header("Idempotency-Key", str(uuid.uuid4()))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]


employees = [
    call("POST", "/employees", {
        "name": name, "email": f"{name.lower()}@example.com", "salary_usd_cents": salary,
        "network": "BASE", "wallet_address": "0x" + f"{i + 1:040x}",
    })
    for i, (name, salary) in enumerate([("Ada", 500_000), ("Grace", 400_000)])
]
draft = call("POST", "/payroll-runs", {"period_start": "2026-01-01", "period_end": "2026-01-31"})
payouts = call("GET", f"/payroll-runs/{draft['id']}/payouts")
paid = call("POST", "/payroll-runs", {
    "type": "ad_hoc", "period_start": "2026-02-01", "period_end": "2026-02-28",
    "items": [{"employee_id": employees[1]["id"], "amount_usd_cents": 100}],
})
call("POST", f"/payroll-runs/{paid['id']}/confirm")
check = call("POST", f"/payroll-runs/{paid['id']}/balance-check")
if check.get("run_status") != "DEPOSITED":
    call("POST", "/treasury/transfers", {"amount_usd_cents": check["deficit_usdc_cents"]})
    call("POST", f"/payroll-runs/{paid['id']}/balance-check")
job = call("POST", f"/payroll-runs/{paid['id']}/execute")["job"]
webhook = call("POST", "/webhooks", {"url": "http://127.0.0.1:9/hooks", "events": ["*"]})
delivery = call("POST", f"/webhooks/{webhook['id']}/test")
spare_key = call("POST", "/api-keys", {"name": "spare", "scopes": ["payroll:read"]})
session = call("POST", "/agent-sessions", {
    "description": "schemathesis agent", "scopes": ["payroll:read", "payroll:execute"],
})
approval = call("POST", f"/payroll-runs/{draft['id']}/execute", key=session["token"])
editor = call("POST", "/api-keys", {"name": "editor", "scopes": ["employees:write"]})
call("PATCH", f"/employees/{employees[0]['id']}", {"wallet_address": "0x" + "ab" * 20},
     key=editor["key"])

for name, value in [
    ("EMPLOYEE_ID", employees[0]["id"]),
    ("EMPLOYEE_IDS", ",".join(e["id"] for e in employees)),
    ("RUN_ID", draft["id"]),
    ("PAYOUT_ID", payouts[0]["id"]),
    ("JOB_ID", job["job_id"]),
    ("WEBHOOK_ID", webhook["id"]),
    ("DELIVERY_ID", delivery["id"]),
    ("KEY_ID", spare_key["id"]),
    ("SESSION_ID", session["id"]),
    ("APPROVAL_ID", approval["id"]),
]:
    print(f"export PAYROLL_SEED_{name}={value}")
