//! Looking withdrawals up in OKX's withdrawal history: one id with `clientId`, or many at once
//! by paging the history (100 records a page, newest first) back to before the oldest send,
//! which costs a page per hundred withdrawals instead of a call per id. Every record under an
//! id is kept: OKX does not document refusing a repeated `clientId`, so it may hold several
//! (see [`combine`]). An id is reported
//! unknown only when the history was read back past its send; anything less is looked up by
//! id, since an id read as unknown may be sent again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{
    OkxProvider,
    protocol::{self, CCY, WithdrawalRecord},
};
use crate::exchange::{
    ExchangeError, RemoteStatus,
    history::{Record, combine, compact_ids, exact_cents},
};

/// Below this many ids, one call per id is cheaper than paging.
const PAGE_FROM: usize = 4;
/// Records per history page (OKX's maximum).
const PAGE_SIZE: usize = 100;
/// How far before the oldest send the pages must reach (clocks differ).
const CLOCK_MARGIN_MS: i64 = 5 * 60 * 1000;

impl OkxProvider {
    pub(super) async fn look_up(
        &self,
        client_ids: &[String],
        sent_since: Option<DateTime<Utc>>,
    ) -> Result<HashMap<String, RemoteStatus>, ExchangeError> {
        let mut out = HashMap::with_capacity(client_ids.len());
        // Ours → OKX's form; an id with no OKX form was never sent.
        let wanted = compact_ids(client_ids, &mut out);
        if let (true, Some(since)) = (wanted.len() >= PAGE_FROM, sent_since) {
            let floor = since.timestamp_millis() - CLOCK_MARGIN_MS;
            if let Some(mut found) = self.page_history(&wanted, floor).await? {
                for (theirs, ours) in wanted {
                    let records = found.remove(&theirs).unwrap_or_default();
                    out.insert(ours, combine(records));
                }
                return Ok(out);
            }
        }
        for (theirs, ours) in wanted {
            // Any failure fails the whole look-up: an id left out would read as unknown.
            let status = self.lookup_one(&theirs).await?;
            out.insert(ours, status);
        }
        Ok(out)
    }

    /// Reads history pages, newest first, back past `floor_ms`, keeping every record of a
    /// `wanted` id (OKX may hold several under one). Answers them by id when the history was
    /// covered back to there (an id without a record is then unknown to OKX), `None` when it
    /// could not be (the ids are then looked up one by one).
    async fn page_history(
        &self,
        wanted: &HashMap<String, String>,
        floor_ms: i64,
    ) -> Result<Option<HashMap<String, Vec<RemoteStatus>>>, ExchangeError> {
        let mut found: HashMap<String, Vec<RemoteStatus>> = HashMap::new();
        let max_pages = wanted.len() / PAGE_SIZE + 20;
        let mut after: Option<i64> = None;
        for _ in 0..max_pages {
            let mut path = format!("/api/v5/asset/withdrawal-history?ccy={CCY}&limit={PAGE_SIZE}");
            if let Some(after) = after {
                // Records before this instant; one millisecond later so that records sharing
                // the last instant of a page are read again rather than skipped.
                path.push_str(&format!("&after={}", after + 1));
            }
            let records: Vec<WithdrawalRecord> =
                self.read(&self.limiters.withdrawal_history, &path).await?;
            let full = records.len() >= PAGE_SIZE;
            let oldest = records
                .iter()
                .filter_map(|r| r.ts.parse::<i64>().ok())
                .min();
            for record in records {
                if wanted.contains_key(&record.client_id) {
                    let id = record.client_id.clone();
                    found
                        .entry(id)
                        .or_default()
                        .push(self.record_status(record));
                }
            }
            match oldest {
                None if full => return Ok(None),
                None => return Ok(Some(found)),
                Some(oldest) if !full || oldest < floor_ms => return Ok(Some(found)),
                // No progress: the page is all one instant; look the ids up one by one.
                Some(oldest) if after == Some(oldest) => return Ok(None),
                Some(oldest) => after = Some(oldest),
            }
        }
        Ok(None)
    }

    /// Looks one client id (OKX's form) up.
    async fn lookup_one(&self, client_id: &str) -> Result<RemoteStatus, ExchangeError> {
        let records: Vec<WithdrawalRecord> = self
            .read(
                &self.limiters.withdrawal_history,
                &format!("/api/v5/asset/withdrawal-history?ccy={CCY}&clientId={client_id}"),
            )
            .await?;
        Ok(combine(
            records
                .into_iter()
                .filter(|r| r.client_id == client_id)
                .map(|r| self.record_status(r))
                .collect(),
        ))
    }

    fn record_status(&self, record: WithdrawalRecord) -> RemoteStatus {
        // OKX's `amt` is what the payee receives: its fee is charged apart.
        Record {
            cex_id: &record.wd_id,
            currency: &record.ccy,
            received: (!record.amt.is_empty()).then(|| exact_cents(&record.amt)),
            amount_text: &record.amt,
            network: &record.chain,
            address: &record.to,
            tx_id: &record.tx_id,
            state: protocol::classify_state(&record.state),
        }
        .status(&self.chains, || {
            format!(
                "OKX withdrawal state {} ({})",
                record.state,
                protocol::describe_state(&record.state)
            )
        })
    }
}
