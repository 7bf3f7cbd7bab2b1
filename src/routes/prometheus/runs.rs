//! The runs paying out now, one set of series each, read from the database at scrape time and
//! written after the recorder's text: a run's series exist while it pays and are gone once it
//! ends, so they never pile up. At most [`MAX_RUNS`] runs: those whose last change is oldest,
//! the likeliest to be stalled (`payroll_runs{status="PAYING_OUT"}` counts them all).

use std::fmt::Write as _;

use payroll_entities::{RunStatus, payroll_run};
use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

/// Runs paying out given their own series, the longest unchanged first.
pub const MAX_RUNS: u64 = 50;

/// The Prometheus text of `payroll_run_payouts{run_id,status}` and
/// `payroll_run_updated_timestamp_seconds{run_id}` for the runs paying out now.
pub async fn render(conn: &DatabaseConnection) -> Result<String, DbErr> {
    let runs = payroll_run::Entity::find()
        .filter(payroll_run::Column::Status.eq(RunStatus::PayingOut))
        .order_by_asc(payroll_run::Column::UpdatedAt)
        .limit(MAX_RUNS)
        .all(conn)
        .await?;
    Ok(text(&runs))
}

fn text(runs: &[payroll_run::Model]) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP payroll_run_payouts Payouts of a run paying out now, by status (at most \
         {MAX_RUNS} runs, the longest unchanged; counted at scrape).\n\
         # TYPE payroll_run_payouts gauge"
    );
    for run in runs {
        for (status, count) in [
            ("PENDING", run.pending_count),
            ("PROCESSING", run.processing_count),
            ("COMPLETED", run.completed_count),
            ("FAILED", run.failed_count),
            ("CANCELLED", run.cancelled_count),
        ] {
            let _ = writeln!(
                out,
                "payroll_run_payouts{{run_id=\"{}\",status=\"{status}\"}} {count}",
                run.id
            );
        }
    }
    out.push_str(
        "# HELP payroll_run_updated_timestamp_seconds When a run paying out last changed (a \
         payout accepted, settled or found stuck), in Unix seconds.\n\
         # TYPE payroll_run_updated_timestamp_seconds gauge\n",
    );
    for run in runs {
        let at = run.updated_at.timestamp_millis() as f64 / 1000.0;
        let _ = writeln!(
            out,
            "payroll_run_updated_timestamp_seconds{{run_id=\"{}\"}} {at}",
            run.id
        );
    }
    out
}
