//! Resources as the API shows them. Events carry the same JSON (`data.object`) as the API
//! answers, so the run actors and the HTTP layer share these.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use payroll_entities::{
    JobStatus, Network, PayoutStatus, RunStatus, RunType, Stablecoin, event, job, payout,
    payroll_run, time,
};
use serde::{Serialize, Serializer};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Type,
        schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat},
    },
};

/// The version of the API's wire format, in every envelope and event.
pub const API_VERSION: &str = "2026-03-01";

/// An instant as the API shows it: UTC, RFC 3339 with milliseconds and a `Z`
/// (`2026-03-01T00:00:00.000Z`), exactly as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

impl From<DateTime<Utc>> for Timestamp {
    fn from(ts: DateTime<Utc>) -> Timestamp {
        Timestamp(ts)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&time::format(&self.0))
    }
}

impl PartialSchema for Timestamp {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some(
                "UTC, RFC 3339 with milliseconds and a `Z`: `2026-03-01T00:00:00.000Z`.",
            ))
            .examples(["2026-03-01T00:00:00.000Z"])
            .into()
    }
}

impl ToSchema for Timestamp {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Timestamp")
    }
}

/// An event as `GET /events` lists it and webhooks deliver it: `data.object` is the run or
/// payout as the API returned it then.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventResource {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub created_at: Timestamp,
    pub api_version: &'static str,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

impl From<event::Model> for EventResource {
    fn from(e: event::Model) -> EventResource {
        EventResource {
            id: e.id,
            event_type: e.event_type,
            created_at: e.created_at.into(),
            api_version: API_VERSION,
            data: e.data,
        }
    }
}

/// The latest job of a run, as embedded in the run and in the execute answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobSummary {
    pub job_id: String,
    pub status: JobStatus,
    /// `/api/v1/jobs/{job_id}`
    pub status_url: String,
    pub estimated_duration_seconds: i64,
}

impl From<&job::Model> for JobSummary {
    fn from(j: &job::Model) -> JobSummary {
        JobSummary {
            job_id: j.id.clone(),
            status: j.status,
            status_url: format!("/api/v1/jobs/{}", j.id),
            estimated_duration_seconds: j.estimated_duration_seconds,
        }
    }
}

/// Counts of the payouts a job covers.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobProgress {
    pub total: i64,
    pub pending: i64,
    pub processing: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// What a job works on.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RelatedResource {
    /// `payroll_run`
    #[serde(rename = "type")]
    pub resource_type: &'static str,
    pub id: String,
    pub url: String,
}

/// A job as `GET /jobs/{job_id}` shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobResource {
    pub job_id: String,
    /// `PAYROLL_EXECUTION`
    #[serde(rename = "type")]
    pub job_type: &'static str,
    pub status: JobStatus,
    pub progress: JobProgress,
    pub related_resource: RelatedResource,
    pub estimated_duration_seconds: i64,
    pub failed_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub finished_at: Option<Timestamp>,
}

impl From<&job::Model> for JobResource {
    fn from(j: &job::Model) -> JobResource {
        JobResource {
            job_id: j.id.clone(),
            job_type: "PAYROLL_EXECUTION",
            status: j.status,
            progress: JobProgress {
                total: j.total,
                pending: j.pending_count,
                processing: j.processing_count,
                completed: j.completed_count,
                failed: j.failed_count,
                cancelled: j.cancelled_count,
            },
            related_resource: RelatedResource {
                resource_type: "payroll_run",
                id: j.payroll_run_id.clone(),
                url: format!("/api/v1/payroll-runs/{}", j.payroll_run_id),
            },
            estimated_duration_seconds: j.estimated_duration_seconds,
            failed_reason: j.failed_reason.clone(),
            created_at: j.created_at.into(),
            updated_at: j.updated_at.into(),
            finished_at: j.finished_at.map(Timestamp::from),
        }
    }
}

/// Counts of the run's payouts by status.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PayoutSummary {
    pub pending: i64,
    pub processing: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// A payroll run as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunResource {
    pub id: String,
    pub status: RunStatus,
    #[serde(rename = "type")]
    pub run_type: RunType,
    pub is_adhoc: bool,
    pub is_test_run: bool,
    pub is_archived: bool,
    pub label: Option<String>,
    pub note: Option<String>,
    pub period_start: Timestamp,
    pub period_end: Timestamp,
    pub pay_date: Option<Timestamp>,
    pub employee_count: i64,
    pub total_amount_usd_cents: i64,
    pub total_fees_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub payout_summary: PayoutSummary,
    /// The latest execution job, or null before the first execute.
    pub job: Option<JobSummary>,
    pub created_by_key_id: Option<String>,
    pub created_at: Timestamp,
    pub confirmed_at: Option<Timestamp>,
    pub deposited_at: Option<Timestamp>,
    pub executed_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub cancelled_at: Option<Timestamp>,
    pub cancel_reason: Option<String>,
}

impl RunResource {
    /// The run as shown, with the summary of its current job if it has one.
    pub fn new(m: &payroll_run::Model, job: Option<&job::Model>) -> RunResource {
        RunResource {
            id: m.id.clone(),
            status: m.status,
            run_type: m.run_type,
            is_adhoc: m.run_type == RunType::AdHoc,
            is_test_run: m.is_test_run,
            is_archived: m.is_archived,
            label: m.label.clone(),
            note: m.note.clone(),
            period_start: m.period_start.into(),
            period_end: m.period_end.into(),
            pay_date: m.pay_date.map(Timestamp::from),
            employee_count: m.employee_count,
            total_amount_usd_cents: m.total_amount_usd_cents,
            total_fees_usd_cents: m.total_fees_usd_cents,
            stablecoin: m.stablecoin,
            payout_summary: PayoutSummary {
                pending: m.pending_count,
                processing: m.processing_count,
                completed: m.completed_count,
                failed: m.failed_count,
                cancelled: m.cancelled_count,
            },
            job: job.map(JobSummary::from),
            created_by_key_id: m.created_by_key_id.clone(),
            created_at: m.created_at.into(),
            confirmed_at: m.confirmed_at.map(Timestamp::from),
            deposited_at: m.deposited_at.map(Timestamp::from),
            executed_at: m.executed_at.map(Timestamp::from),
            completed_at: m.completed_at.map(Timestamp::from),
            cancelled_at: m.cancelled_at.map(Timestamp::from),
            cancel_reason: m.cancel_reason.clone(),
        }
    }
}

/// A payout as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PayoutResource {
    pub id: String,
    pub payroll_run_id: String,
    pub employee_id: String,
    pub employee_name: String,
    pub employee_email: String,
    pub status: PayoutStatus,
    pub is_test_run: bool,
    /// Net amount: what is withdrawn.
    pub amount_usd_cents: i64,
    pub fee_usd_cents: i64,
    pub test_run_deduction_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub network: Network,
    pub wallet_address: String,
    pub note: Option<String>,
    pub attempt: i32,
    pub client_withdrawal_id: Option<String>,
    pub cex_withdrawal_id: Option<String>,
    pub on_chain_tx_hash: Option<String>,
    pub block_explorer_url: Option<String>,
    pub failed_reason: Option<String>,
    /// Set while the exchange's answer is still unknown after `exchange.max_sends` sends, or
    /// the payout has been PROCESSING longer than `exchange.stuck_after_ms`: it is never sent
    /// again on its own; an operator resolves it (`POST /payouts/{payout_id}/resolve`).
    pub stuck_since: Option<Timestamp>,
    /// The first send of this attempt.
    pub initiated_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&payout::Model> for PayoutResource {
    fn from(m: &payout::Model) -> PayoutResource {
        PayoutResource {
            id: m.id.clone(),
            payroll_run_id: m.payroll_run_id.clone(),
            employee_id: m.employee_id.clone(),
            employee_name: m.employee_name.clone(),
            employee_email: m.employee_email.clone(),
            status: m.status,
            is_test_run: m.is_test_run,
            amount_usd_cents: m.amount_usd_cents,
            fee_usd_cents: m.fee_usd_cents,
            test_run_deduction_usd_cents: m.test_run_deduction_usd_cents,
            stablecoin: m.stablecoin,
            network: m.network,
            wallet_address: m.wallet_address.clone(),
            note: m.note.clone(),
            attempt: m.attempt,
            client_withdrawal_id: m.client_withdrawal_id.clone(),
            cex_withdrawal_id: m.cex_withdrawal_id.clone(),
            on_chain_tx_hash: m.on_chain_tx_hash.clone(),
            block_explorer_url: m.block_explorer_url.clone(),
            failed_reason: m.failed_reason.clone(),
            stuck_since: m.stuck_since.map(Timestamp::from),
            initiated_at: m.initiated_at.map(Timestamp::from),
            completed_at: m.completed_at.map(Timestamp::from),
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn timestamps_show_milliseconds_and_z() {
        let ts = Utc
            .with_ymd_and_hms(2026, 3, 1, 7, 5, 9)
            .single()
            .expect("valid date")
            + chrono::Duration::milliseconds(42);
        let shown = serde_json::to_value([Some(Timestamp(ts)), None]).expect("serializes");
        assert_eq!(shown, serde_json::json!(["2026-03-01T07:05:09.042Z", null]));
    }
}
