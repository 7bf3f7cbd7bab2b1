"""Schemathesis hooks for the payroll API.

The OpenAPI document states every constraint that JSON Schema can state. A few rules it can only
describe in words, because they depend on another field, on a checksum or on the clock; these
hooks bring generated values that already fit the document's shapes in line with those rules, so
that schemathesis tests the operations rather than those rules (which the API suite tests):

- Idempotency-Key: a well-formed key is replaced by a fresh UUID v4 for every request. Reusing a
  key for a different request is refused with 422 IDEMPOTENCY_KEY_REUSED by design.
- wallet_address: a Solana network takes the base58 of 32 bytes; an EVM network takes 0x and 40
  hex characters whose mixed case must be an EIP-55 checksum (lower case needs none), and never
  the zero address.
- contract_end_date not before contract_start_date, period_end after period_start (in the same
  body).
- on_chain_tx_hash of a payout resolved: the document takes a hash in either chain's form; the
  payout's network (BASE for the seeded ones) decides which, so a well-formed hash is replaced
  by one of BASE's form.
- one item per employee in a run; one row per email in an import. A run's payees are the
  seeded employees (seed.py), so that run creation gets past them.
- the run's own API key is not revoked (every later request would be refused with 401).
- a webhook url: the run's server allows http:// and private addresses, and the url of a valid
  case is replaced by one on the loopback (a generated host does not resolve here).

What depends on what the database holds or on the clock (a patch's wallet against the stored
network, a run's payees that do not exist or are INACTIVE, an expiry already past) is answered
409 STATE_CONFLICT, which schemathesis expects of valid data; no hook or setting changes that.
"""

import datetime
import os
import re
import secrets
import uuid

import schemathesis

UUID_V4 = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$")
ADDRESS = re.compile(r"^\s*(0x[0-9a-fA-F]{40}|[1-9A-HJ-NP-Za-km-z]{32,44})\s*$")
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
TX_HASH = re.compile(r"^\s*(0x[0-9a-fA-F]{64}|[1-9A-HJ-NP-Za-km-z]{64,90})\s*$")


def base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = BASE58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def instant(raw):
    """A date or date-time as the API reads it, or None."""
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    try:
        if len(text) == 10:
            day = datetime.date.fromisoformat(text)
            return datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc)
        value = datetime.datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    try:
        return value.astimezone(datetime.timezone.utc)
    except (OverflowError, ValueError):
        return None


def fix_employee(row):
    network = row.get("network")
    wallet = row.get("wallet_address")
    if isinstance(wallet, str) and ADDRESS.match(wallet):
        if network == "SOLANA":
            row["wallet_address"] = base58(b"\x01" + secrets.token_bytes(31))
        else:
            row["wallet_address"] = "0x" + secrets.token_hex(20)
    start, end = row.get("contract_start_date"), row.get("contract_end_date")
    if isinstance(start, str) and isinstance(end, str) and end < start:
        row["contract_start_date"], row["contract_end_date"] = end, start


def fix_body(body):
    if not isinstance(body, dict):
        return
    fix_employee(body)
    start, end = instant(body.get("period_start")), instant(body.get("period_end"))
    if isinstance(body.get("period_start"), str) and isinstance(body.get("period_end"), str):
        # Unreadable here (year 0000): replaced too.
        if start is None or end is None or end <= start:
            body["period_start"], body["period_end"] = "2026-01-01", "2026-01-31"
    seeded = [e for e in os.environ.get("PAYROLL_SEED_EMPLOYEE_IDS", "").split(",") if e]
    items = body.get("items")
    if isinstance(items, list):
        kept = [item for item in items if isinstance(item, dict)][: max(len(seeded), 1)]
        for item, employee in zip(kept, seeded):
            item["employee_id"] = employee
        body["items"] = kept or items
    employee_ids = body.get("employee_ids")
    if isinstance(employee_ids, list) and seeded:
        body["employee_ids"] = seeded[: max(1, min(len(employee_ids), len(seeded)))]
    if isinstance(body.get("url"), str):
        body["url"] = "http://127.0.0.1:9/hooks"
    # A hash in either chain's form: the seeded payouts are on BASE, which takes 0x and 64 hex.
    tx_hash = body.get("on_chain_tx_hash")
    if isinstance(tx_hash, str) and TX_HASH.match(tx_hash):
        body["on_chain_tx_hash"] = "0x" + secrets.token_hex(32)


def fix_import(rows):
    emails = set()
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            fix_employee(row)
            email = row.get("email")
            if isinstance(email, str):
                if email.strip().lower() in emails:
                    row["email"] = f"row{i}.{email.strip()}"
                emails.add(row["email"].strip().lower())


# A case-level hook: schemathesis applies it in every phase, coverage included. Only cases
# meant to be valid are changed; a case meant to be invalid is sent as generated.
@schemathesis.hook
def map_case(ctx, case):
    if case.meta is not None and not case.meta.generation.mode.is_positive:
        return case
    headers = case.headers
    if headers and isinstance(headers.get("Idempotency-Key"), str) and UUID_V4.match(headers["Idempotency-Key"]):
        headers["Idempotency-Key"] = str(uuid.uuid4())
    if isinstance(case.body, list):
        fix_import(case.body)
    else:
        fix_body(case.body)
    return case


# Again just before the call: the stateful phase fills values from earlier answers into a case
# after it was generated (a stored Solana wallet into a patch that names BASE), and those must
# fit the same rules.
@schemathesis.hook
def before_call(ctx, case, **kwargs):
    map_case(ctx, case)


# DELETE revokes an API key or deactivates an employee (CONTRACT §2, §8): the record stays
# readable, REVOKED or INACTIVE, for the audit trail. The stateful phase takes a DELETE to mean
# the resource is gone (a later read must be 404), so these two are left to the other phases.
SOFT_DELETES = ("/api-keys/", "/employees/")


def phase_of(case):
    if case.meta is None:
        return None
    name = case.meta.phase.name
    return getattr(name, "value", name)


@schemathesis.hook
def filter_case(ctx, case):
    deletes = case.method.upper() == "DELETE"
    if deletes and phase_of(case) == "stateful" and case.path.startswith(SOFT_DELETES):
        return False
    own = os.environ.get("PAYROLL_SCHEMATHESIS_KEY_ID")
    revokes = deletes and case.path.startswith("/api-keys/")
    return not (revokes and own and (case.path_parameters or {}).get("key_id") == own)
