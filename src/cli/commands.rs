//! Maps each client command of the CLI to its API call.

use awc::http::Method;
use serde_json::{Map, Value, json};

use crate::{
    cli::{
        args::{
            AgentSessionsCommand, ApprovalsCommand, AuditCommand, Command, EmployeeFields,
            EmployeesCommand, EventsCommand, JobsCommand, KeysCommand, Page, PayoutsCommand,
            RunsCommand, TreasuryCommand, WaitArgs, WebhooksCommand,
        },
        client::{Call, Client, Failure, Format},
    },
    http::dates::DateInput,
};

/// Refuses a malformed date before any request is sent.
fn date(flag: &str, value: Option<String>) -> Result<Option<String>, Failure> {
    match value {
        Some(v) => DateInput::parse(&v)
            .map(|_| Some(v))
            .map_err(|why| Failure::Usage(format!("--{flag}: {why}"))),
        None => Ok(None),
    }
}

fn paged(call: Call, page: Page) -> Call {
    call.param("limit", page.limit).param("offset", page.offset)
}

fn insert(body: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        body.insert(key.to_owned(), value.into());
    }
}

fn employee_body(fields: EmployeeFields) -> Result<Map<String, Value>, Failure> {
    let mut body = Map::new();
    insert(&mut body, "name", fields.name);
    insert(&mut body, "salary_usd_cents", fields.salary_usd_cents);
    insert(&mut body, "network", fields.network);
    insert(&mut body, "wallet_address", fields.wallet_address);
    insert(&mut body, "employment_type", fields.employment_type);
    insert(&mut body, "status", fields.status);
    insert(
        &mut body,
        "contract_start_date",
        date("contract-start-date", fields.contract_start_date)?,
    );
    insert(
        &mut body,
        "contract_end_date",
        date("contract-end-date", fields.contract_end_date)?,
    );
    Ok(body)
}

/// A JSON argument, given inline or as @FILE.
fn json_arg(flag: &str, raw: &str) -> Result<Value, Failure> {
    let text = match raw.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::Usage(format!("--{flag} @{path}: {e}")))?,
        None => raw.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| Failure::Usage(format!("--{flag}: not JSON: {e}")))
}

/// Runs a client command.
pub async fn execute(client: &Client, command: Command) -> Result<(), Failure> {
    match command {
        Command::Runs(cmd) => runs(client, cmd).await,
        Command::Payouts(cmd) => {
            let call = match cmd {
                PayoutsCommand::Get { payout_id } => Call::get(format!("/payouts/{payout_id}")),
                PayoutsCommand::Retry { payout_id } => {
                    Call::post(format!("/payouts/{payout_id}/retry"))
                }
                PayoutsCommand::Cancel { payout_id } => {
                    Call::post(format!("/payouts/{payout_id}/cancel"))
                }
                PayoutsCommand::Resolve {
                    payout_id,
                    outcome,
                    on_chain_tx_hash,
                    note,
                } => {
                    let mut body = Map::new();
                    body.insert("outcome".into(), outcome.into());
                    insert(&mut body, "on_chain_tx_hash", on_chain_tx_hash);
                    insert(&mut body, "note", note);
                    Call::post(format!("/payouts/{payout_id}/resolve")).json(Value::Object(body))
                }
            };
            client.run(&call).await.map(drop)
        }
        Command::Jobs(JobsCommand::Get { job_id, wait }) => {
            if !wait.wait {
                return client
                    .run(&Call::get(format!("/jobs/{job_id}")))
                    .await
                    .map(drop);
            }
            let answer = client.send(&Call::get(format!("/jobs/{job_id}"))).await?;
            if answer.status >= 400 {
                client.print(&answer)?;
                return Err(Failure::Api);
            }
            let run_id = answer.json()["data"]["related_resource"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            client
                .wait_for_run(&run_id, wait.timeout, wait.interval)
                .await
        }
        Command::Employees(cmd) => employees(client, cmd).await,
        Command::Treasury(cmd) => {
            let call = match cmd {
                TreasuryCommand::Balance => Call::get("/treasury/balance"),
                TreasuryCommand::Transfer {
                    amount_usd_cents,
                    direction,
                    note,
                } => {
                    let mut body = Map::new();
                    body.insert("amount_usd_cents".into(), amount_usd_cents.into());
                    insert(&mut body, "direction", direction);
                    insert(&mut body, "note", note);
                    Call::post("/treasury/transfers").json(Value::Object(body))
                }
                TreasuryCommand::Transfers { page } => {
                    paged(Call::get("/treasury/transfers"), page)
                }
            };
            client.run(&call).await.map(drop)
        }
        Command::Keys(cmd) => {
            let call = match cmd {
                KeysCommand::List { page } => paged(Call::get("/api-keys"), page),
                KeysCommand::Get { key_id } => Call::get(format!("/api-keys/{key_id}")),
                KeysCommand::Create {
                    name,
                    scopes,
                    expires_at,
                } => {
                    let mut body = Map::new();
                    body.insert("name".into(), name.into());
                    body.insert("scopes".into(), json!(scopes));
                    insert(&mut body, "expires_at", date("expires-at", expires_at)?);
                    Call::post("/api-keys").json(Value::Object(body))
                }
                KeysCommand::Rotate { key_id } => Call::post(format!("/api-keys/{key_id}/rotate")),
                KeysCommand::Revoke { key_id } => {
                    Call::get(format!("/api-keys/{key_id}")).with_method(Method::DELETE)
                }
            };
            client.run(&call).await.map(drop)
        }
        Command::AgentSessions(cmd) => {
            let call = match cmd {
                AgentSessionsCommand::List { page } => paged(Call::get("/agent-sessions"), page),
                AgentSessionsCommand::Get { session_id } => {
                    Call::get(format!("/agent-sessions/{session_id}"))
                }
                AgentSessionsCommand::Create {
                    description,
                    scopes,
                    expires_at,
                } => {
                    let mut body = Map::new();
                    body.insert("description".into(), description.into());
                    body.insert("scopes".into(), json!(scopes));
                    insert(&mut body, "expires_at", date("expires-at", expires_at)?);
                    Call::post("/agent-sessions").json(Value::Object(body))
                }
                AgentSessionsCommand::Revoke { session_id } => {
                    Call::get(format!("/agent-sessions/{session_id}")).with_method(Method::DELETE)
                }
            };
            client.run(&call).await.map(drop)
        }
        Command::Approvals(cmd) => {
            let call = match cmd {
                ApprovalsCommand::List {
                    status,
                    operation,
                    resource_id,
                    page,
                } => paged(
                    Call::get("/approvals")
                        .param("status", status)
                        .param("operation", operation)
                        .param("resource_id", resource_id),
                    page,
                ),
                ApprovalsCommand::Get { approval_id } => {
                    Call::get(format!("/approvals/{approval_id}"))
                }
                ApprovalsCommand::Approve { approval_id } => {
                    Call::post(format!("/approvals/{approval_id}/approve"))
                }
                ApprovalsCommand::Reject {
                    approval_id,
                    reason,
                } => Call::post(format!("/approvals/{approval_id}/reject"))
                    .json(json!({"reason": reason})),
            };
            client.run(&call).await.map(drop)
        }
        Command::Audit(AuditCommand::List {
            api_key_id,
            actor_type,
            agent_session_id,
            action,
            operation,
            resource_type,
            resource_id,
            after,
            before,
            page,
        }) => {
            let call = Call::get("/audit-log")
                .param("api_key_id", api_key_id)
                .param("actor_type", actor_type)
                .param("agent_session_id", agent_session_id)
                .param("action", action)
                .param("operation", operation)
                .param("resource_type", resource_type)
                .param("resource_id", resource_id)
                .param("after", date("after", after)?)
                .param("before", date("before", before)?);
            client.run(&paged(call, page)).await.map(drop)
        }
        Command::Events(EventsCommand::List {
            event_type,
            created_after,
            page,
        }) => {
            let call = Call::get("/events")
                .param("type", event_type)
                .param("created_after", date("created-after", created_after)?);
            client.run(&paged(call, page)).await.map(drop)
        }
        Command::Webhooks(cmd) => webhooks(client, cmd).await,
        Command::Openapi => client.run(&Call::get("/openapi.json")).await.map(drop),
        other => Err(Failure::Usage(format!("not a client command: {other:?}"))),
    }
}

/// Sends a run command, then with --wait follows the run until every payout is terminal.
async fn run_and_wait(
    client: &Client,
    call: Call,
    run_id: &str,
    wait: WaitArgs,
) -> Result<(), Failure> {
    if !wait.wait {
        return client.run(&call).await.map(drop);
    }
    let answer = client.send(&call).await?;
    if answer.status >= 400 {
        client.print(&answer)?;
        return Err(Failure::Api);
    }
    client
        .wait_for_run(run_id, wait.timeout, wait.interval)
        .await
}

async fn runs(client: &Client, cmd: RunsCommand) -> Result<(), Failure> {
    let path = |run_id: &str, op: &str| format!("/payroll-runs/{run_id}/{op}");
    let call = match cmd {
        RunsCommand::List {
            status,
            run_type,
            is_adhoc,
            is_test_run,
            include_archived,
            created_after,
            created_before,
            sort,
            page,
        } => paged(
            Call::get("/payroll-runs")
                .param("status", status)
                .param("type", run_type)
                .param("is_adhoc", is_adhoc)
                .param("is_test_run", is_test_run)
                .param("include_archived", include_archived.then_some(true))
                .param("created_after", date("created-after", created_after)?)
                .param("created_before", date("created-before", created_before)?)
                .param("sort", sort),
            page,
        ),
        RunsCommand::Get { run_id } => Call::get(format!("/payroll-runs/{run_id}")),
        RunsCommand::Create {
            period_start,
            period_end,
            pay_date,
            label,
            note,
            run_type,
            is_test_run,
            employee_ids,
            items,
        } => {
            let mut body = Map::new();
            insert(
                &mut body,
                "period_start",
                date("period-start", Some(period_start))?,
            );
            insert(
                &mut body,
                "period_end",
                date("period-end", Some(period_end))?,
            );
            insert(&mut body, "pay_date", date("pay-date", pay_date)?);
            insert(&mut body, "label", label);
            insert(&mut body, "note", note);
            insert(&mut body, "type", run_type);
            if is_test_run {
                body.insert("is_test_run".into(), true.into());
            }
            insert(
                &mut body,
                "employee_ids",
                employee_ids.map(|ids| json!(ids)),
            );
            if let Some(items) = items {
                body.insert("items".into(), json_arg("items", &items)?);
            }
            Call::post("/payroll-runs").json(Value::Object(body))
        }
        RunsCommand::Confirm { run_id } => Call::post(path(&run_id, "confirm")),
        RunsCommand::BalanceCheck { run_id } => Call::post(path(&run_id, "balance-check")),
        RunsCommand::Execute { run_id, wait } => {
            return run_and_wait(client, Call::post(path(&run_id, "execute")), &run_id, wait).await;
        }
        RunsCommand::Sync { run_id, wait } => {
            return run_and_wait(client, Call::post(path(&run_id, "sync")), &run_id, wait).await;
        }
        RunsCommand::RetryFailed { run_id, wait } => {
            return run_and_wait(
                client,
                Call::post(path(&run_id, "retry-failed")),
                &run_id,
                wait,
            )
            .await;
        }
        RunsCommand::Cancel { run_id, reason } => {
            let mut body = Map::new();
            insert(&mut body, "reason", reason);
            Call::post(path(&run_id, "cancel")).json(Value::Object(body))
        }
        RunsCommand::Archive { run_id } => Call::post(path(&run_id, "archive")),
        RunsCommand::Payouts {
            run_id,
            status,
            page,
        } => {
            let call = Call::get(path(&run_id, "payouts")).param("status", status);
            if client.format == Format::Csv {
                // Every payout, streamed by the server and written out as it arrives.
                call.param("format", Some("csv")).streamed()
            } else {
                paged(call, page)
            }
        }
    };
    client.run(&call).await.map(drop)
}

async fn employees(client: &Client, cmd: EmployeesCommand) -> Result<(), Failure> {
    let call = match cmd {
        EmployeesCommand::List {
            status,
            employment_type,
            search,
            page,
        } => paged(
            Call::get("/employees")
                .param("status", status)
                .param("employment_type", employment_type)
                .param("search", search),
            page,
        ),
        EmployeesCommand::Get { employee_id } => Call::get(format!("/employees/{employee_id}")),
        EmployeesCommand::Create { email, fields } => {
            let mut body = employee_body(fields)?;
            body.insert("email".into(), email.into());
            Call::post("/employees").json(Value::Object(body))
        }
        EmployeesCommand::Update {
            employee_id,
            fields,
        } => {
            let body = employee_body(fields)?;
            if body.is_empty() {
                return Err(Failure::Usage(
                    "nothing to change: pass at least one field flag".into(),
                ));
            }
            Call::post(format!("/employees/{employee_id}"))
                .with_method(Method::PATCH)
                .json(Value::Object(body))
        }
        EmployeesCommand::Deactivate { employee_id } => {
            Call::get(format!("/employees/{employee_id}")).with_method(Method::DELETE)
        }
        EmployeesCommand::Import { file } => {
            let bytes = std::fs::read(&file)
                .map_err(|e| Failure::Usage(format!("{}: {e}", file.display())))?;
            let is_json = file
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
                || bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
            let content_type = if is_json {
                "application/json"
            } else {
                "text/csv"
            };
            Call::post("/employees/import").raw(bytes, content_type)
        }
        EmployeesCommand::ApproveWallet { employee_id } => {
            Call::post(format!("/employees/{employee_id}/wallet-approvals"))
        }
    };
    client.run(&call).await.map(drop)
}

async fn webhooks(client: &Client, cmd: WebhooksCommand) -> Result<(), Failure> {
    let path = |webhook_id: &str, op: &str| format!("/webhooks/{webhook_id}/{op}");
    let call = match cmd {
        WebhooksCommand::Create {
            url,
            events,
            description,
        } => {
            let mut body = Map::new();
            body.insert("url".into(), url.into());
            body.insert("events".into(), json!(events));
            insert(&mut body, "description", description);
            Call::post("/webhooks").json(Value::Object(body))
        }
        WebhooksCommand::List { status, page } => {
            paged(Call::get("/webhooks").param("status", status), page)
        }
        WebhooksCommand::Get { webhook_id } => Call::get(format!("/webhooks/{webhook_id}")),
        WebhooksCommand::Delete { webhook_id } => {
            Call::get(format!("/webhooks/{webhook_id}")).with_method(Method::DELETE)
        }
        WebhooksCommand::Enable { webhook_id } => Call::post(path(&webhook_id, "enable")),
        WebhooksCommand::RotateSecret { webhook_id } => {
            Call::post(path(&webhook_id, "rotate-secret"))
        }
        WebhooksCommand::Test { webhook_id } => Call::post(path(&webhook_id, "test")),
        WebhooksCommand::Deliveries {
            webhook_id,
            status,
            event_type,
            page,
        } => paged(
            Call::get(path(&webhook_id, "deliveries"))
                .param("status", status)
                .param("event_type", event_type),
            page,
        ),
        WebhooksCommand::RetryDelivery {
            webhook_id,
            delivery_id,
        } => Call::post(format!(
            "/webhooks/{webhook_id}/deliveries/{delivery_id}/retry"
        )),
    };
    client.run(&call).await.map(drop)
}
