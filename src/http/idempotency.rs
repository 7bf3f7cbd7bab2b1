//! Idempotency (CONTRACT §3). A write first *claims* its key (a committed IN_FLIGHT record that
//! expires after `idempotency.lock_timeout_ms`), then completes the record with its answer in
//! the same transaction as its effect. A failed write releases its claim, so after fixing the
//! cause the same key runs the operation.

use chrono::{DateTime, Duration, Utc};
use payroll_entities::{IdempotencyState, db::Db, idempotency_record, time};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter,
    sea_query::OnConflict,
};
use sha2::{Digest, Sha256};

use crate::{
    config::IdempotencySettings,
    http::{
        error::{ApiError, ErrorCode},
        request::IdempotencyClaim,
    },
};

/// The keys the OpenAPI document allows: hyphenated UUID v4 of the RFC 4122 variant, as
/// [`parse_key`] accepts (it also takes the same key quoted, braced or unhyphenated).
pub const KEY_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$";

/// The key from the `Idempotency-Key` header: a UUID v4, bare or quoted, kept lower-case.
pub fn parse_key(header: Option<&str>) -> Result<String, ApiError> {
    let Some(raw) = header else {
        return Err(ApiError::new(
            ErrorCode::IdempotencyKeyRequired,
            "This write requires an Idempotency-Key header.",
        ));
    };
    let trimmed = raw.trim();
    let unquoted = trimmed
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(trimmed);
    match uuid::Uuid::try_parse(unquoted) {
        Ok(id) if id.get_version_num() == 4 && id.get_variant() == uuid::Variant::RFC4122 => {
            Ok(id.hyphenated().to_string())
        }
        _ => Err(ApiError::new(
            ErrorCode::InvalidIdempotencyKey,
            format!(
                "The Idempotency-Key `{}` is not a UUID v4.",
                truncate(trimmed, 80)
            ),
        )),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// operationId + path parameters + SHA-256 of the body (an empty body counts as `{}`).
pub fn fingerprint(operation: &str, params: &[(&str, String)], body: &[u8]) -> String {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    let mut out = String::from(operation);
    for (name, value) in params {
        out.push_str(&format!(";{name}={value}"));
    }
    out.push(';');
    out.push_str(&hex::encode(Sha256::digest(body)));
    out
}

/// What a key's stored record says about a new request with it.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No live record: the request may run.
    Proceed,
    /// The answer of the first request, to send again.
    Replay { status: u16, body: String },
    /// The first request is still running.
    InUse,
    /// The key was used for a different request.
    Reused,
}

fn judge(record: &idempotency_record::Model, fingerprint: &str, now: DateTime<Utc>) -> Verdict {
    if record.expires_at <= now {
        return Verdict::Proceed;
    }
    // A claim whose request crashed stored nothing: the key is free, whatever the request.
    if record.state == IdempotencyState::InFlight && record.locked_until <= now {
        return Verdict::Proceed;
    }
    if record.fingerprint != fingerprint {
        return Verdict::Reused;
    }
    match (record.state, record.response_status, &record.response_body) {
        (IdempotencyState::Completed, Some(status), Some(body)) => Verdict::Replay {
            status: u16::try_from(status).unwrap_or(200),
            body: body.clone(),
        },
        _ if record.locked_until > now => Verdict::InUse,
        // A claim whose request crashed: it may be taken over.
        _ => Verdict::Proceed,
    }
}

pub fn verdict_error(verdict: &Verdict) -> Option<ApiError> {
    match verdict {
        Verdict::InUse => Some(ApiError::new(
            ErrorCode::IdempotencyKeyInUse,
            "A request with this Idempotency-Key is still being processed.",
        )),
        Verdict::Reused => Some(ApiError::new(
            ErrorCode::IdempotencyKeyReused,
            "This Idempotency-Key was already used for a different request.",
        )),
        _ => None,
    }
}

async fn find<C: ConnectionTrait>(
    conn: &C,
    lineage_id: &str,
    key: &str,
) -> Result<Option<idempotency_record::Model>, DbErr> {
    idempotency_record::Entity::find_by_id((lineage_id.to_owned(), key.to_owned()))
        .one(conn)
        .await
}

/// Looks at the record without writing.
pub async fn check(
    db: &Db,
    lineage_id: &str,
    key: &str,
    fingerprint: &str,
) -> Result<Verdict, DbErr> {
    Ok(match find(&db.conn, lineage_id, key).await? {
        Some(record) => judge(&record, fingerprint, time::now()),
        None => Verdict::Proceed,
    })
}

/// Claims the key for this request. `Proceed` means the claim is now held, and `claim`
/// carries its token.
pub async fn claim(
    db: &Db,
    settings: &IdempotencySettings,
    claim: &mut IdempotencyClaim,
) -> Result<Verdict, DbErr> {
    let now = time::now();
    let locked_until = now + Duration::milliseconds(settings.lock_timeout_ms as i64);
    let tx = db.begin_write().await?;
    let fresh = idempotency_record::ActiveModel {
        lineage_id: Set(claim.lineage_id.clone()),
        idempotency_key: Set(claim.key.clone()),
        fingerprint: Set(claim.fingerprint.clone()),
        state: Set(IdempotencyState::InFlight),
        locked_until: Set(locked_until),
        response_status: Set(None),
        response_body: Set(None),
        created_at: Set(now),
        expires_at: Set(now + Duration::seconds(settings.retention_seconds as i64)),
    };
    let inserted = idempotency_record::Entity::insert(fresh.clone())
        .on_conflict(
            OnConflict::columns([
                idempotency_record::Column::LineageId,
                idempotency_record::Column::IdempotencyKey,
            ])
            .do_nothing()
            .to_owned(),
        )
        .exec_without_returning(&*tx)
        .await?;
    let verdict = if inserted == 1 {
        Verdict::Proceed
    } else {
        match find(&*tx, &claim.lineage_id, &claim.key).await? {
            Some(record) => {
                let verdict = judge(&record, &claim.fingerprint, now);
                if verdict == Verdict::Proceed {
                    // Expired record or abandoned claim: take it over.
                    idempotency_record::Entity::update(fresh).exec(&*tx).await?;
                }
                verdict
            }
            None => Verdict::InUse,
        }
    };
    tx.commit().await?;
    if verdict == Verdict::Proceed {
        claim.locked_until = Some(locked_until);
    }
    Ok(verdict)
}

/// Drops the claim of a request that failed, so the key can be sent again. Only the claim
/// this request holds: one taken over by a later request stays.
pub async fn release(db: &Db, claim: &IdempotencyClaim) -> Result<(), DbErr> {
    let Some(token) = claim.locked_until else {
        return Ok(());
    };
    let tx = db.begin_write().await?;
    idempotency_record::Entity::delete_many()
        .filter(idempotency_record::Column::LineageId.eq(claim.lineage_id.as_str()))
        .filter(idempotency_record::Column::IdempotencyKey.eq(claim.key.as_str()))
        .filter(idempotency_record::Column::State.eq(IdempotencyState::InFlight))
        .filter(idempotency_record::Column::LockedUntil.eq(token))
        .exec(&*tx)
        .await?;
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_uuid_v4() {
        let key = "3f2b8c1e-9d4a-4b7e-8f6a-1c2d3e4f5a6b";
        assert_eq!(parse_key(Some(key)).ok().as_deref(), Some(key));
        assert_eq!(
            parse_key(Some(&format!("\"{key}\""))).ok().as_deref(),
            Some(key)
        );
        assert_eq!(
            parse_key(Some(&key.to_uppercase())).ok().as_deref(),
            Some(key)
        );
        let v1 = "c232ab00-9414-11ec-b3c8-9f6bdeced846";
        assert_eq!(
            parse_key(Some(v1)).map_err(|e| e.code),
            Err(ErrorCode::InvalidIdempotencyKey)
        );
        assert_eq!(
            parse_key(Some("abc")).map_err(|e| e.code),
            Err(ErrorCode::InvalidIdempotencyKey)
        );
        assert_eq!(
            parse_key(None).map_err(|e| e.code),
            Err(ErrorCode::IdempotencyKeyRequired)
        );
    }

    #[test]
    fn fingerprints_cover_operation_params_and_body() {
        let p = vec![("run_id", "run_1".to_owned())];
        let a = fingerprint("confirmPayrollRun", &p, b"");
        assert_eq!(a, fingerprint("confirmPayrollRun", &p, b"{}"));
        assert_ne!(
            a,
            fingerprint("confirmPayrollRun", &[("run_id", "run_2".into())], b"")
        );
        assert_ne!(a, fingerprint("cancelPayrollRun", &p, b""));
        assert_ne!(a, fingerprint("confirmPayrollRun", &p, b"{\"a\":1}"));
    }

    #[test]
    fn verdicts_follow_the_record() {
        let now = time::now();
        let mut record = idempotency_record::Model {
            lineage_id: "key_1".into(),
            idempotency_key: "k".into(),
            fingerprint: "f".into(),
            state: IdempotencyState::InFlight,
            locked_until: now + Duration::seconds(5),
            response_status: None,
            response_body: None,
            created_at: now,
            expires_at: now + Duration::days(1),
        };
        assert_eq!(judge(&record, "f", now), Verdict::InUse);
        assert_eq!(judge(&record, "g", now), Verdict::Reused);
        record.locked_until = now - Duration::seconds(1);
        assert_eq!(judge(&record, "f", now), Verdict::Proceed);
        // An abandoned claim frees the key for any request.
        assert_eq!(judge(&record, "g", now), Verdict::Proceed);
        record.state = IdempotencyState::Completed;
        record.response_status = Some(201);
        record.response_body = Some("{}".into());
        assert_eq!(
            judge(&record, "f", now),
            Verdict::Replay {
                status: 201,
                body: "{}".into()
            }
        );
        record.expires_at = now;
        assert_eq!(judge(&record, "g", now), Verdict::Proceed);
    }
}
