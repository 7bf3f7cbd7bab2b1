//! Who calls: the bearer credential of a request, an API key (`mpk_live_…`) or an agent
//! session's token (`mps_live_…`, CONTRACT §16), looked up by its keyed hash and checked to be
//! usable now. A session is usable while it and its creating key are: revoking or expiring the
//! key ends its sessions.

use actix_web::http::header::{self, HeaderMap};
use chrono::{DateTime, Duration, Utc};
use payroll_entities::{ApiKeyStatus, agent_session, api_key, time};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
use serde_json::json;

use crate::{
    http::{
        auth,
        error::{ApiError, ErrorCode},
        request::Caller,
    },
    state::AppState,
};

fn invalid(why: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidApiKey, format!("{why}."))
}

fn expired(at: Option<DateTime<Utc>>, what: &str) -> ApiError {
    let at = at.map(|t| time::format(&t));
    ApiError::new(
        ErrorCode::ApiKeyExpired,
        format!(
            "The {what} expired at {}.",
            at.as_deref().unwrap_or("an earlier time")
        ),
    )
    .detail("expired_at", json!(at))
}

/// The caller of a request with this Authorization header, or 401.
pub(crate) async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let Some(header) = headers.get(header::AUTHORIZATION) else {
        return Err(invalid("The Authorization header is missing"));
    };
    let token = header
        .to_str()
        .ok()
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| invalid("The Authorization header must be `Bearer <API key>`"))?;
    if auth::is_well_formed_session_token(token) {
        return authenticate_session(state, token).await;
    }
    if !auth::is_well_formed_key(token) {
        return Err(invalid(
            "The API key is malformed (keys start with mpk_live_, agent session tokens with mps_live_)",
        ));
    }
    let hash = auth::hash_key(state.pepper.expose().as_bytes(), token);
    let key = key_by_hash(state, &hash).await?;
    let now = time::now();
    usable(&key, now, "API key")?;
    if key
        .last_used_at
        .is_none_or(|t| now - t >= Duration::minutes(1))
    {
        touch(state.db.clone(), Touched::Key(key.id.clone()), now);
        state.verified_keys.touched(&hash, now);
    }
    Ok(Caller {
        scopes: auth::parse_scope_list(&key.scopes),
        key_id: key.id,
        key_lineage_id: key.lineage_id,
        session_id: None,
    })
}

/// A key by its keyed hash: held briefly (see [`crate::http::key_cache`]) or read.
async fn key_by_hash(state: &AppState, hash: &str) -> Result<api_key::Model, ApiError> {
    match state.verified_keys.get(hash) {
        Ok(key) => Ok(key),
        Err(start) => {
            let key = api_key::Entity::find()
                .filter(api_key::Column::KeyHash.eq(hash))
                .one(&state.db.conn)
                .await?
                .ok_or_else(|| invalid("The API key is not known"))?;
            state
                .verified_keys
                .store(start, hash.to_owned(), key.clone());
            Ok(key)
        }
    }
}

/// 401 unless the key is ACTIVE at `now`.
fn usable(key: &api_key::Model, now: DateTime<Utc>, what: &str) -> Result<(), ApiError> {
    match auth::key_status(key, now) {
        (ApiKeyStatus::Revoked, _) => Err(invalid(&format!("The {what} has been revoked"))),
        (ApiKeyStatus::Expired, at) => Err(expired(at, what)),
        (ApiKeyStatus::Active, _) => Ok(()),
    }
}

/// The status of a session at `now`, given its creating key: it ends with the key.
pub fn session_status(
    session: &agent_session::Model,
    creator: Option<&api_key::Model>,
    now: DateTime<Utc>,
) -> (ApiKeyStatus, Option<DateTime<Utc>>) {
    if let Some(revoked) = session.revoked_at {
        return (ApiKeyStatus::Revoked, Some(revoked));
    }
    let Some(creator) = creator else {
        return (ApiKeyStatus::Revoked, None);
    };
    match auth::key_status(creator, now) {
        (ApiKeyStatus::Revoked, at) => (ApiKeyStatus::Revoked, at),
        (ApiKeyStatus::Expired, at) => {
            (ApiKeyStatus::Expired, at.map(|t| t.min(session.expires_at)))
        }
        (ApiKeyStatus::Active, _) if session.expires_at <= now => {
            (ApiKeyStatus::Expired, Some(session.expires_at))
        }
        (ApiKeyStatus::Active, _) => (ApiKeyStatus::Active, None),
    }
}

async fn authenticate_session(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    let hash = auth::hash_key(state.pepper.expose().as_bytes(), token);
    let session = agent_session::Entity::find()
        .filter(agent_session::Column::TokenHash.eq(hash.as_str()))
        .one(&state.db.conn)
        .await?
        .ok_or_else(|| invalid("The agent session token is not known"))?;
    let creator = api_key::Entity::find_by_id(session.created_by_key_id.as_str())
        .one(&state.db.conn)
        .await?;
    let now = time::now();
    match session_status(&session, creator.as_ref(), now) {
        (ApiKeyStatus::Revoked, _) => {
            return Err(invalid(
                "The agent session has been revoked (or its creating key was)",
            ));
        }
        (ApiKeyStatus::Expired, at) => return Err(expired(at, "agent session")),
        (ApiKeyStatus::Active, _) => {}
    }
    if session
        .last_used_at
        .is_none_or(|t| now - t >= Duration::minutes(1))
    {
        touch(state.db.clone(), Touched::Session(session.id.clone()), now);
    }
    Ok(Caller {
        scopes: auth::parse_scope_list(&session.scopes),
        key_id: session.created_by_key_id,
        key_lineage_id: session.lineage_id,
        session_id: Some(session.id),
    })
}

enum Touched {
    Key(String),
    Session(String),
}

/// Updates `last_used_at` (at most once a minute) without delaying the request.
fn touch(db: payroll_entities::db::Db, what: Touched, now: DateTime<Utc>) {
    use sea_orm::sea_query::ExprTrait;
    actix_web::rt::spawn(async move {
        let result = async {
            let tx = db.begin_write().await?;
            let stale = now - Duration::minutes(1);
            match what {
                Touched::Key(id) => {
                    api_key::Entity::update_many()
                        .col_expr(api_key::Column::LastUsedAt, Expr::value(now))
                        .filter(api_key::Column::Id.eq(id))
                        .filter(
                            api_key::Column::LastUsedAt
                                .is_null()
                                .or(api_key::Column::LastUsedAt.lt(stale)),
                        )
                        .exec(&*tx)
                        .await?;
                }
                Touched::Session(id) => {
                    agent_session::Entity::update_many()
                        .col_expr(agent_session::Column::LastUsedAt, Expr::value(now))
                        .filter(agent_session::Column::Id.eq(id))
                        .filter(
                            agent_session::Column::LastUsedAt
                                .is_null()
                                .or(agent_session::Column::LastUsedAt.lt(stale)),
                        )
                        .exec(&*tx)
                        .await?;
                }
            }
            tx.commit().await
        }
        .await;
        if let Err(err) = result {
            tracing::debug!(error = %err, "last_used_at not updated");
        }
    });
}
