//! `GET /payroll-runs/{run_id}/payouts` as CSV: every payout, read page by page so memory
//! stays flat, with free text defused so a spreadsheet never runs it as a formula.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use futures_util::stream;
use payroll_entities::{PayoutStatus, payout, time};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::http::error::ApiError;

/// Payouts read per page.
const CSV_PAGE: u64 = 1000;

const CSV_HEADER: &[&str] = &[
    "id",
    "payroll_run_id",
    "employee_id",
    "employee_name",
    "employee_email",
    "status",
    "is_test_run",
    "amount_usd_cents",
    "fee_usd_cents",
    "test_run_deduction_usd_cents",
    "stablecoin",
    "network",
    "wallet_address",
    "note",
    "attempt",
    "client_withdrawal_id",
    "cex_withdrawal_id",
    "on_chain_tx_hash",
    "block_explorer_url",
    "failed_reason",
    "stuck_since",
    "initiated_at",
    "completed_at",
    "created_at",
    "updated_at",
];

use crate::text_out::csv_cell as text_cell;

fn csv_row(writer: &mut csv::Writer<Vec<u8>>, p: &payout::Model) -> Result<(), csv::Error> {
    let opt_ts = |t: &Option<DateTime<Utc>>| t.as_ref().map(time::format).unwrap_or_default();
    writer.write_record([
        p.id.as_str(),
        &p.payroll_run_id,
        &p.employee_id,
        &text_cell(&p.employee_name),
        &text_cell(&p.employee_email),
        p.status.as_str(),
        if p.is_test_run { "true" } else { "false" },
        &p.amount_usd_cents.to_string(),
        &p.fee_usd_cents.to_string(),
        &p.test_run_deduction_usd_cents.to_string(),
        p.stablecoin.as_str(),
        p.network.as_str(),
        &p.wallet_address,
        &text_cell(p.note.as_deref().unwrap_or_default()),
        &p.attempt.to_string(),
        p.client_withdrawal_id.as_deref().unwrap_or_default(),
        // What an exchange or an operator wrote: defused as any text is.
        &text_cell(p.cex_withdrawal_id.as_deref().unwrap_or_default()),
        &text_cell(p.on_chain_tx_hash.as_deref().unwrap_or_default()),
        &text_cell(p.block_explorer_url.as_deref().unwrap_or_default()),
        &text_cell(p.failed_reason.as_deref().unwrap_or_default()),
        &opt_ts(&p.stuck_since),
        &opt_ts(&p.initiated_at),
        &opt_ts(&p.completed_at),
        &time::format(&p.created_at),
        &time::format(&p.updated_at),
    ])
}

/// Every payout of the run as CSV, read page by page (by id) so memory stays flat.
pub fn csv_stream(
    db: payroll_entities::db::Db,
    run_id: String,
    status: Option<PayoutStatus>,
) -> HttpResponse {
    struct Cursor {
        db: payroll_entities::db::Db,
        run_id: String,
        status: Option<PayoutStatus>,
        after: Option<String>,
        header_sent: bool,
        done: bool,
    }
    let cursor = Cursor {
        db,
        run_id,
        status,
        after: None,
        header_sent: false,
        done: false,
    };
    let body = stream::unfold(cursor, |mut c| async move {
        if c.done {
            return None;
        }
        let mut writer = csv::WriterBuilder::new().from_writer(Vec::with_capacity(256 * 1024));
        if !c.header_sent {
            c.header_sent = true;
            if let Err(err) = writer.write_record(CSV_HEADER) {
                return Some((Err(ApiError::internal(err)), c));
            }
        }
        let mut select =
            payout::Entity::find().filter(payout::Column::PayrollRunId.eq(c.run_id.as_str()));
        if let Some(status) = c.status {
            select = select.filter(payout::Column::Status.eq(status));
        }
        if let Some(after) = &c.after {
            select = select.filter(payout::Column::Id.gt(after.as_str()));
        }
        let page = match select
            .order_by_asc(payout::Column::Id)
            .limit(CSV_PAGE)
            .all(&c.db.conn)
            .await
        {
            Ok(page) => page,
            Err(err) => {
                c.done = true;
                return Some((Err(ApiError::from(err)), c));
            }
        };
        if (page.len() as u64) < CSV_PAGE {
            c.done = true;
        }
        for p in &page {
            if let Err(err) = csv_row(&mut writer, p) {
                c.done = true;
                return Some((Err(ApiError::internal(err)), c));
            }
        }
        c.after = page.last().map(|p| p.id.clone());
        match writer.into_inner() {
            Ok(bytes) => Some((Ok(web::Bytes::from(bytes)), c)),
            Err(err) => {
                c.done = true;
                Some((Err(ApiError::internal(err)), c))
            }
        }
    });
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .streaming(body)
}
