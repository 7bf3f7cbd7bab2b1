//! `payroll admin …`: commands an operator runs on the server's database, also while the
//! server runs on it. Each is audited with actor `ADMIN`.

use anyhow::bail;
use payroll_entities::{ActorType, SandboxAccount, api_key, time};
use sea_orm::{EntityTrait, IntoActiveModel};
use serde_json::json;

use crate::{
    config::Settings,
    http::{
        audit::{self, AuditRecord},
        auth,
        dates::{DayEdge, parse_instant},
        keys::{self, ApiKeyResource},
    },
    startup,
};

/// Adds `delta` cents to a sandbox balance; returns the account and its new balance.
pub async fn adjust_sandbox(
    settings: &Settings,
    account: &str,
    delta: i64,
) -> anyhow::Result<serde_json::Value> {
    let account = SandboxAccount::parse(account)
        .ok_or_else(|| anyhow::anyhow!("--account must be exchange or treasury"))?;
    let db = startup::connect_and_migrate(settings).await?;
    // Opening the provider creates the balances on a database that has none yet.
    payroll_actors::exchange::sandbox::SandboxProvider::open(
        db.clone(),
        settings.exchange.sandbox.clone(),
    )
    .await?;
    let balance = payroll_actors::exchange::sandbox::adjust(&db, account, delta)
        .await
        .map_err(anyhow::Error::msg)?;
    let tx = db.begin_write().await?;
    let record = AuditRecord::new(
        "SANDBOX_BALANCE_ADJUSTED",
        "sandbox_account",
        account.as_str(),
    )
    .details(json!({"delta_usd_cents": delta, "balance_usd_cents": balance.0}));
    audit::insert(&*tx, audit::actor_entry(ActorType::Admin, &record)).await?;
    tx.commit().await?;
    Ok(json!({"account": account, "balance_usd_cents": balance.0}))
}

/// Creates a key and returns its resource, plaintext included.
pub async fn create_key(
    settings: &Settings,
    name: &str,
    scopes: &[String],
    expires_at: Option<&str>,
) -> anyhow::Result<ApiKeyResource> {
    let name = name.trim();
    if name.is_empty() {
        bail!("--name must not be empty");
    }
    let unknown: Vec<&str> = scopes
        .iter()
        .map(|s| s.trim())
        .filter(|s| !auth::is_known_scope(s))
        .collect();
    if !unknown.is_empty() || scopes.is_empty() {
        bail!(
            "unknown scopes {unknown:?}; known: {}, {}",
            auth::all_scope_names().join(", "),
            auth::Scope::WILDCARDS.join(", ")
        );
    }
    let expires_at = match expires_at {
        Some(raw) => Some(parse_instant(raw, DayEdge::Start).map_err(anyhow::Error::msg)?),
        None => None,
    };
    if expires_at.is_some_and(|t| t <= time::now()) {
        bail!("--expires-at must be in the future");
    }
    let scopes: Vec<String> = scopes.iter().map(|s| s.trim().to_owned()).collect();
    let pepper = startup::load_pepper(settings)?;
    let db = startup::connect_and_migrate(settings).await?;
    startup::check_pepper(&db, &pepper).await?;
    let (model, plaintext) =
        keys::new_key(pepper.expose().as_bytes(), name, &scopes, expires_at, None);
    let tx = db.begin_write().await?;
    api_key::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    let record = AuditRecord::new("API_KEY_CREATED", "api_key", &model.id)
        .details(json!({"name": name, "scopes": scopes}));
    audit::insert(&*tx, audit::actor_entry(ActorType::Admin, &record)).await?;
    tx.commit().await?;
    Ok(ApiKeyResource::from_model(&model, time::now()).with_plaintext(plaintext))
}

/// Checks the configured exchange provider as an operator would before paying through it:
/// credentials (a balance read), withdrawal permission where the exchange lets a key read
/// it, the balance and deposit address, and each of our networks' terms. Answers the report
/// and whether every check passed; only reads are made at the exchange. Every network of
/// ours is listed: one without a name in the provider's map shows `can_withdraw: false`.
pub async fn check_exchange(settings: &Settings) -> anyhow::Result<(serde_json::Value, bool)> {
    // A real exchange's provider needs no database (nor a migration of one a running server
    // uses); the sandbox's account is in it.
    let provider = match startup::remote_exchange_provider(settings)? {
        Some(provider) => provider,
        None => {
            let db = startup::connect_and_migrate(settings).await?;
            startup::exchange_provider(settings, &db).await?
        }
    };
    let mut failed: Vec<String> = Vec::new();
    let balance = match provider.balances().await {
        Ok(b) => json!({"ok": true, "available_usd_cents": b.available.0,
                        "deposit_address": b.deposit_address, "network": b.network}),
        Err(err) => {
            failed.push("credentials_and_balance".into());
            json!({"ok": false, "error": err.to_string()})
        }
    };
    let permission = match provider.may_withdraw().await {
        Ok(Some(true)) => json!({"ok": true, "may_withdraw": true}),
        Ok(Some(false)) => {
            failed.push("withdrawal_permission".into());
            json!({"ok": false, "may_withdraw": false,
                   "hint": "enable withdrawals for this API key (Binance: with an IP access restriction)"})
        }
        Ok(None) => json!({"ok": true, "may_withdraw": null,
                           "note": "this exchange does not let a key read its permissions; the first withdrawal tells"}),
        Err(err) => {
            failed.push("withdrawal_permission".into());
            json!({"ok": false, "error": err.to_string()})
        }
    };
    let mut networks = Vec::new();
    for network in payroll_entities::Network::ALL {
        networks.push(match provider.quote(*network).await {
            Ok(Some(q)) => json!({"network": network, "can_withdraw": true,
                                  "fee_usd_cents": q.fee.0, "minimum_usd_cents": q.minimum.0,
                                  "step_usd_cents": q.step.0, "fee_taken_from_amount": q.fee_from_amount}),
            Ok(None) => json!({"network": network, "can_withdraw": false}),
            Err(err) => {
                if !failed.iter().any(|f| f == "networks") {
                    failed.push("networks".into());
                }
                json!({"network": network, "error": err.to_string()})
            }
        });
    }
    let passed = failed.is_empty();
    let report = json!({
        "provider": provider.name(),
        "ok": passed,
        "failed": failed,
        "balance": balance,
        "withdrawal_permission": permission,
        "networks": networks,
        "resends": if provider.refuses_repeated_client_id() {
            "the exchange refuses a repeated client id: exchange.reconcile_grace_ms and exchange.max_sends apply"
        } else {
            "the exchange does not document refusing a repeated client id: exchange.resend_grace_without_dedupe_ms and exchange.max_sends_without_dedupe apply"
        },
    });
    Ok((report, passed))
}
