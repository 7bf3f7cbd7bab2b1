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
