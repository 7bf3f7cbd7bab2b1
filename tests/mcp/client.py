"""Drives `payroll mcp` with the official Python MCP SDK, as an agent host would.

Run by tests/api/mcp.rs against a spawned server. Environment:
  PAYROLL_BIN       the payroll binary
  PAYROLL_BASE_URL  the server
  ADMIN_KEY         a key with every scope
  READ_KEY          a key with payroll:read alone
  CLOSED_URL        a base URL where nothing listens
Exits non-zero (an AssertionError) at the first thing that is not as CONTRACT §15 says.
"""

import json
import os
import sys
import time
import urllib.request
import uuid

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

BIN = os.environ["PAYROLL_BIN"]
BASE_URL = os.environ["PAYROLL_BASE_URL"]
ADMIN_KEY = os.environ["ADMIN_KEY"]
READ_KEY = os.environ["READ_KEY"]
CLOSED_URL = os.environ["CLOSED_URL"]

WRITES = {"post", "put", "patch", "delete"}


def served_operations():
    """The canonical operations of the served document, found here independently of the
    server's own code: (operationId, method, required scopes or None)."""
    with urllib.request.urlopen(f"{BASE_URL}/api/v1/openapi.json", timeout=30) as response:
        document = json.load(response)
    out = {}
    for path, item in document["paths"].items():
        if path in ("/openapi.json", "/docs"):
            continue
        for method, op in item.items():
            if method not in {"get"} | WRITES:
                continue
            op_id = op.get("operationId")
            if (
                op_id is None
                or "x-alias-of" in op
                or "aliases" in op.get("tags", [])
                or op_id.endswith("ViaRunsAlias")
            ):
                continue
            out[op_id] = (method, op.get("x-required-scopes"))
    return out


def session_for(key, base_url=BASE_URL):
    params = StdioServerParameters(
        command=BIN,
        args=["mcp"],
        env={"PAYROLL_API_KEY": key, "PAYROLL_BASE_URL": base_url},
    )
    return stdio_client(params)


def texts(result):
    return [c.text for c in result.content if c.type == "text"]


def idempotency_key_named(result):
    for text in texts(result):
        if text.startswith("Idempotency-Key: "):
            return text.split()[1]
    return None


class Agent:
    def __init__(self, session):
        self.session = session

    async def ok(self, name, /, **arguments):
        result = await self.session.call_tool(name, arguments)
        assert not result.is_error, f"{name} {arguments}: {texts(result)}"
        envelope = result.structured_content
        assert envelope is not None and "data" in envelope, f"{name}: {texts(result)}"
        assert json.loads(texts(result)[0]) == envelope, "the text is the same envelope"
        return envelope

    async def error(self, name, code, /, **arguments):
        result = await self.session.call_tool(name, arguments)
        assert result.is_error, f"{name} {arguments} should fail with {code}: {texts(result)}"
        envelope = result.structured_content
        assert envelope["error"]["code"] == code, f"{name}: {envelope}"
        for field in ("message", "details", "recovery_hint", "docs_url"):
            assert field in envelope["error"], f"{field} missing from {envelope}"
        assert json.loads(texts(result)[0]) == envelope
        return envelope


async def with_every_scope(operations):
    async with session_for(ADMIN_KEY) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == set(operations), (
                f"tools {sorted(set(tools) ^ set(operations))} differ from the document"
            )
            for name, tool in tools.items():
                method, _ = operations[name]
                schema = tool.input_schema
                assert schema["type"] == "object", name
                assert "$ref" not in json.dumps(schema), f"{name} has a $ref"
                assert "Idempotency-Key" not in schema["properties"], name
                assert ("idempotency_key" in schema["properties"]) == (method in WRITES), name
                assert tool.annotations.read_only_hint == (method == "get"), name
                assert tool.description, name
            for name in (
                "executePayrollRun",
                "createTreasuryTransfer",
                "retryFailedPayouts",
                "cancelPayrollRun",
                "revokeApiKey",
            ):
                assert tools[name].annotations.destructive_hint is True, name
            assert tools["syncPayrollRun"].annotations.idempotent_hint is True
            assert tools["syncPayrollRun"].annotations.destructive_hint is False
            assert tools["importEmployees"].input_schema["properties"]["rows"]["type"] == "array"

            agent = Agent(session)
            await pay_a_run(agent)


async def pay_a_run(agent):
    # Staff through the tools: one by create, one by import.
    ada = await agent.ok(
        "createEmployee",
        name="Ada",
        email="ada@example.com",
        salary_usd_cents=500000,
        network="BASE",
        wallet_address="0x" + "11" * 20,
    )
    imported = await agent.ok(
        "importEmployees",
        rows=[
            {
                "name": "Grace",
                "email": "grace@example.com",
                "salary_usd_cents": 400000,
                "network": "SOLANA",
                "wallet_address": "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T",
            }
        ],
    )
    assert imported["data"]["created"] == 1, imported
    listed = await agent.ok("listEmployees", search="ada")
    assert [e["id"] for e in listed["data"]] == [ada["data"]["id"]], listed

    # An idempotency_key that is not a UUID v4 is named as the fault, never as a server that
    # could not be reached; nothing is written.
    for malformed in ("not-a-key", "3f2b8c1e-9d4a-1b7e-8f6a-1c2d3e4f5a6b", 42):
        refused = await agent.session.call_tool(
            "createEmployee",
            {
                "name": "Eve",
                "email": "eve@example.com",
                "salary_usd_cents": 1,
                "network": "BASE",
                "wallet_address": "0x" + "22" * 20,
                "idempotency_key": malformed,
            },
        )
        assert refused.is_error, texts(refused)
        said = texts(refused)[0]
        assert "idempotency_key" in said and "UUID v4" in said, said
        assert "could not be reached" not in said, said
    none = await agent.ok("listEmployees", search="eve")
    assert none["data"] == [], none

    # A bad argument is the API's 400, naming it; the process carries on.
    bad = await agent.error(
        "createPayrollRun",
        "INVALID_REQUEST_BODY",
        period_start="2026-03-01",
        period_end="2026-03-31",
        surprise=1,
    )
    fields = [e["field"] for e in bad["error"]["details"]["validation_errors"]]
    assert "surprise" in fields, bad

    created = await agent.session.call_tool(
        "createPayrollRun",
        {"period_start": "2026-03-01", "period_end": "2026-03-31", "label": "March"},
    )
    assert not created.is_error, texts(created)
    run = created.structured_content["data"]
    assert run["status"] == "DRAFT", run
    assert run["total_amount_usd_cents"] == 900000, run
    key = idempotency_key_named(created)
    assert key is not None and uuid.UUID(key).version == 4, texts(created)
    # The key named in the result replays the same write: the same run, nothing new.
    again = await agent.ok(
        "createPayrollRun",
        period_start="2026-03-01",
        period_end="2026-03-31",
        label="March",
        idempotency_key=key,
    )
    assert again == created.structured_content, (again, created.structured_content)
    runs = await agent.ok("listPayrollRuns")
    assert [r["id"] for r in runs["data"]] == [run["id"]], runs

    run_id = run["id"]
    confirmed = await agent.ok("confirmPayrollRun", run_id=run_id)
    assert confirmed["data"]["status"] == "CONFIRMED", confirmed

    # Fund the exchange from the treasury, through the tools alone.
    short = await agent.ok("checkPayrollRunBalance", run_id=run_id)
    deficit = short["data"]["deficit_usdc_cents"]
    if deficit > 0:
        await agent.ok("createTreasuryTransfer", amount_usd_cents=deficit)
        checked = await agent.ok("checkPayrollRunBalance", run_id=run_id)
        assert checked["data"]["sufficient"] is True, checked
    balance = await agent.ok("getTreasuryBalance")
    assert "exchange" in json.dumps(balance), balance

    executed = await agent.ok("executePayrollRun", run_id=run_id)
    assert executed["data"]["status"] == "PAYING_OUT", executed
    job_id = executed["data"]["job"]["job_id"]

    deadline = time.monotonic() + 60
    while True:
        synced = await agent.ok("syncPayrollRun", run_id=run_id)
        if synced["data"]["status"] == "COMPLETED":
            break
        assert time.monotonic() < deadline, f"the run did not complete: {synced}"
        await anyio.sleep(0.2)
    fetched = await agent.ok("getPayrollRun", run_id=run_id)
    assert fetched["data"]["status"] == "COMPLETED", fetched
    job = await agent.ok("getJob", job_id=job_id)
    assert job["data"]["job_id"] == job_id, job
    assert job["data"]["related_resource"]["id"] == run_id, job
    payouts = await agent.ok("getPayrollRunPayouts", run_id=run_id)
    assert {p["status"] for p in payouts["data"]} == {"COMPLETED"}, payouts
    csv = await agent.session.call_tool(
        "getPayrollRunPayouts", {"run_id": run_id, "format": "csv"}
    )
    assert not csv.is_error and csv.structured_content is None, texts(csv)
    lines = texts(csv)[0].strip().splitlines()
    assert len(lines) == 3 and "status" in lines[0], lines

    # The wrong state: the agent learns what it may do instead.
    refused = await agent.error("confirmPayrollRun", "INVALID_STATUS_TRANSITION", run_id=run_id)
    details = refused["error"]["details"]
    assert details["current_status"] == "COMPLETED", details
    assert "allowed_operations" in details, details

    # The server audits MCP calls like any other, under the operationId.
    deadline = time.monotonic() + 10
    while True:
        audit = await agent.ok("listAuditEntries", operation="executePayrollRun")
        if audit["data"]:
            break
        assert time.monotonic() < deadline, audit
        await anyio.sleep(0.1)
    assert audit["data"][0]["resource_id"] == run_id, audit


async def with_payroll_read(operations):
    expected = {
        name
        for name, (_, scopes) in operations.items()
        if scopes is None or "payroll:read" in scopes
    }
    async with session_for(READ_KEY) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == expected, sorted(set(tools) ^ expected)
            assert "listPayrollRuns" in tools and "getCurrentApiKey" in tools
            assert "executePayrollRun" not in tools and "listEmployees" not in tools
            # Every listed tool reads, but sync, which payroll:read may call.
            writes = {n for n, t in tools.items() if not t.annotations.read_only_hint}
            assert writes == {"syncPayrollRun", "createAgentSession", "revokeAgentSession"}, writes
            # A tool the key may not call is refused by the MCP server itself, as an unknown
            # one is: the call never reaches the API.
            for hidden in ("executePayrollRun", "createEmployee", "revokeApiKey", "noSuchTool"):
                try:
                    await session.call_tool(hidden, {"run_id": "run_x"})
                except MCPError as err:
                    assert "is offered to this API key" in str(err), err
                    assert hidden in str(err), err
                else:
                    raise AssertionError(f"{hidden} was called with a payroll:read key")
            agent = Agent(session)
            me = await agent.ok("getCurrentApiKey")
            assert me["data"]["scopes"] == ["payroll:read"], me


async def with_agent_session(operations):
    """A human's key creates a session; the agent, with the session's token, prepares a run and
    asks to execute it (an approval); the human approves; the run is paid."""
    async with session_for(ADMIN_KEY) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            human = Agent(session)
            tools = {t.name: t for t in (await session.list_tools()).tools}
            for name in ("approveApproval", "rejectApproval", "approveEmployeeWallet"):
                assert tools[name].annotations.destructive_hint is True, name
            assert tools["getApproval"].annotations.read_only_hint is True
            await human.ok(
                "createEmployee",
                name="Lin",
                email="lin@example.com",
                salary_usd_cents=120000,
                network="BASE",
                wallet_address="0x" + "33" * 20,
            )
            await human.ok("createTreasuryTransfer", amount_usd_cents=500000)
            created = await human.ok(
                "createAgentSession",
                description="april payroll agent",
                scopes=["payroll:read", "payroll:write", "payroll:execute", "treasury:read"],
            )
            token = created["data"]["token"]
            assert token.startswith("mps_live_"), created
            session_id = created["data"]["id"]

            async with session_for(token) as (read2, write2):
                async with ClientSession(read2, write2) as agent_session:
                    await agent_session.initialize()
                    listed = {t.name for t in (await agent_session.list_tools()).tools}
                    expected = {
                        name
                        for name, (_, scopes) in operations.items()
                        if name != "createAgentSession"
                        and (
                            scopes is None
                            or any(
                                s in scopes
                                for s in ("payroll:read", "payroll:write", "payroll:execute", "treasury:read")
                            )
                        )
                    }
                    assert listed == expected, sorted(listed ^ expected)
                    assert "approveApproval" not in listed and "getApproval" in listed
                    agent = Agent(agent_session)
                    me = await agent.ok("getCurrentApiKey")
                    assert me["data"]["id"] == session_id, me
                    run = await agent.ok(
                        "createPayrollRun",
                        period_start="2026-04-01",
                        period_end="2026-04-30",
                        employee_ids=[
                            e["id"]
                            for e in (await human.ok("listEmployees", search="lin"))["data"]
                        ],
                    )
                    run_id = run["data"]["id"]
                    await agent.ok("confirmPayrollRun", run_id=run_id)
                    checked = await agent.ok("checkPayrollRunBalance", run_id=run_id)
                    assert checked["data"]["run_status"] == "DEPOSITED", checked
                    held = await agent.ok("executePayrollRun", run_id=run_id)
                    approval = held["data"]
                    assert approval["status"] == "PENDING", held
                    assert approval["requested_by"]["agent_session_id"] == session_id, held
                    still = await agent.ok("getPayrollRun", run_id=run_id)
                    assert still["data"]["status"] == "DEPOSITED", still

            approved = await human.ok("approveApproval", approval_id=approval["id"])
            assert approved["data"]["status"] == "APPROVED", approved
            deadline = time.monotonic() + 60
            while True:
                synced = await human.ok("syncPayrollRun", run_id=run_id)
                if synced["data"]["status"] == "COMPLETED":
                    break
                assert time.monotonic() < deadline, f"the run did not complete: {synced}"
                await anyio.sleep(0.2)
            audit = await human.ok("listAuditEntries", agent_session_id=session_id, limit=200)
            assert audit["data"] and all(e["actor_type"] == "AGENT_SESSION" for e in audit["data"])


async def with_no_server():
    async with session_for(ADMIN_KEY, CLOSED_URL) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # Which tools the key may call cannot be known: the call is refused, naming the
            # server that could not be reached.
            try:
                await session.call_tool("getPayrollRun", {"run_id": "run_x"})
            except MCPError as err:
                assert CLOSED_URL in str(err), err
            else:
                raise AssertionError("a tool called without a server to read the key from")
            try:
                await session.list_tools()
            except MCPError as err:
                assert CLOSED_URL in str(err), err
            else:
                raise AssertionError("tools listed without a server to read the key from")
            # Still serving after the failures.
            await session.send_ping()


async def main():
    operations = served_operations()
    assert len(operations) > 30, operations
    await with_every_scope(operations)
    await with_payroll_read(operations)
    await with_agent_session(operations)
    await with_no_server()
    print(f"mcp: {len(operations)} tools checked; a run paid through the tools")


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
