//! Looking withdrawals up in Binance's withdrawal history: one id by `withdrawOrderId` (in
//! windows of under 7 days, as Binance requires with it), or many at once by reading the whole
//! history from before the oldest send (windows of under 90 days, pages of 1000 by `offset`),
//! which costs a page per thousand withdrawals instead of a call per id. An id is reported
//! unknown only when the history was read back past its send; anything less is looked up by
//! id, since an id read as unknown may be sent again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use payroll_entities::Cents;

use super::{
    BinanceProvider,
    protocol::{self, COIN, HistoryRecord},
};
use crate::exchange::{
    ExchangeError, RemoteStatus,
    history::{Record, combine, compact_ids},
    wire::{UNITS_PER_CENT, units},
};
use awc::http::Method;

/// Below this many ids, one call per id is cheaper than reading the history.
const PAGE_FROM: usize = 4;
/// Records per page (Binance's maximum).
const PAGE_SIZE: usize = 1000;
/// How far before the oldest send the history is read (clocks differ).
const CLOCK_MARGIN_MS: i64 = 5 * 60 * 1000;
/// A window with `withdrawOrderId`: under 7 days.
const ID_WINDOW_MS: i64 = 7 * 24 * 3600 * 1000 - 60_000;
/// A window without it: under 90 days.
const BATCH_WINDOW_MS: i64 = 90 * 24 * 3600 * 1000 - 60_000;

/// `[from, to)` cut into windows of at most `width`, newest last.
fn windows(from_ms: i64, to_ms: i64, width: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut start = from_ms;
    while start < to_ms {
        let end = (start + width).min(to_ms);
        out.push((start, end));
        start = end;
    }
    out
}

impl BinanceProvider {
    pub(super) async fn look_up(
        &self,
        client_ids: &[String],
        sent_since: Option<DateTime<Utc>>,
    ) -> Result<HashMap<String, RemoteStatus>, ExchangeError> {
        let mut out = HashMap::with_capacity(client_ids.len());
        // Ours → Binance's form; an id with no Binance form was never sent.
        let wanted = compact_ids(client_ids, &mut out);
        // Binance's clock, as last read: its history is stamped by it.
        let now_ms = Utc::now().timestamp_millis()
            + self
                .clock_offset_ms
                .load(std::sync::atomic::Ordering::Relaxed)
            + CLOCK_MARGIN_MS;
        let floor_ms = sent_since.map(|s| s.timestamp_millis() - CLOCK_MARGIN_MS);
        // Never an empty range (a clock of ours ahead of Binance's): that would read nothing
        // and call every id unknown.
        let now_ms = now_ms.max(floor_ms.unwrap_or(now_ms) + 2 * CLOCK_MARGIN_MS);
        if let (true, Some(floor)) = (wanted.len() >= PAGE_FROM, floor_ms)
            && let Some(mut found) = self.read_history(&wanted, floor, now_ms).await?
        {
            for (theirs, ours) in wanted {
                let records = found.remove(&theirs).unwrap_or_default();
                out.insert(ours, combine(records));
            }
            return Ok(out);
        }
        for (theirs, ours) in wanted {
            // Any failure fails the whole look-up: an id left out would read as unknown.
            let status = self.lookup_one(&theirs, floor_ms, now_ms).await?;
            out.insert(ours, status);
        }
        Ok(out)
    }

    /// Reads the whole history from `floor_ms` to `now_ms`, keeping every record of a `wanted`
    /// id (Binance may hold several under one). Answers them by id when it was all read (an id
    /// without a record is then unknown to Binance), `None` for a history too long to page
    /// (the ids are then looked up one by one).
    async fn read_history(
        &self,
        wanted: &HashMap<String, String>,
        floor_ms: i64,
        now_ms: i64,
    ) -> Result<Option<HashMap<String, Vec<RemoteStatus>>>, ExchangeError> {
        let mut found: HashMap<String, Vec<RemoteStatus>> = HashMap::new();
        let mut pages_left = wanted.len() / PAGE_SIZE + 20;
        let ranges = windows(floor_ms, now_ms, BATCH_WINDOW_MS);
        if ranges.is_empty() {
            return Ok(None);
        }
        for (start, end) in ranges {
            let mut offset = 0;
            loop {
                if pages_left == 0 {
                    return Ok(None);
                }
                pages_left -= 1;
                let records: Vec<HistoryRecord> = self
                    .read(
                        &self.limiters.history,
                        Method::GET,
                        "/sapi/v1/capital/withdraw/history",
                        &[
                            ("coin", COIN.into()),
                            ("startTime", start.to_string()),
                            ("endTime", end.to_string()),
                            ("offset", offset.to_string()),
                            ("limit", PAGE_SIZE.to_string()),
                        ],
                    )
                    .await?;
                let full = records.len() >= PAGE_SIZE;
                offset += records.len();
                for record in records {
                    if wanted.contains_key(&record.withdraw_order_id) {
                        let id = record.withdraw_order_id.clone();
                        found
                            .entry(id)
                            .or_default()
                            .push(self.record_status(record));
                    }
                }
                if !full {
                    break;
                }
            }
        }
        Ok(Some(found))
    }

    /// Looks one id (Binance's form) up, window by window from the oldest.
    async fn lookup_one(
        &self,
        order_id: &str,
        floor_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<RemoteStatus, ExchangeError> {
        let ranges: Vec<Option<(i64, i64)>> = match floor_ms {
            Some(floor) => windows(floor, now_ms, ID_WINDOW_MS)
                .into_iter()
                .map(Some)
                .collect(),
            // Never sent by our record: Binance's default, the last 7 days.
            None => vec![None],
        };
        // Every window is read: Binance may hold several withdrawals under one id.
        let mut statuses = Vec::new();
        for range in ranges {
            let mut params = vec![
                ("coin", COIN.to_owned()),
                ("withdrawOrderId", order_id.to_owned()),
            ];
            if let Some((start, end)) = range {
                params.push(("startTime", start.to_string()));
                params.push(("endTime", end.to_string()));
            }
            let records: Vec<HistoryRecord> = self
                .read(
                    &self.limiters.history,
                    Method::GET,
                    "/sapi/v1/capital/withdraw/history",
                    &params,
                )
                .await?;
            statuses.extend(
                records
                    .into_iter()
                    .filter(|r| r.withdraw_order_id == order_id)
                    .map(|r| self.record_status(r)),
            );
        }
        Ok(combine(statuses))
    }

    fn record_status(&self, record: HistoryRecord) -> RemoteStatus {
        // What the payee receives: what was asked for, less Binance's fee (none when it says
        // none), in whole cents rounded down. A fee of less than a cent's precision was rounded
        // up when it was added, so the payee receives the amount and a fraction of a cent more.
        let received = (!record.amount.is_empty()).then(|| {
            let fee = if record.transaction_fee.is_empty() {
                Some(0)
            } else {
                units(&record.transaction_fee)
            };
            match (units(&record.amount), fee) {
                (Some(amount), Some(fee)) if amount >= fee => {
                    i64::try_from((amount - fee) / UNITS_PER_CENT).map_or(Cents(-1), Cents)
                }
                _ => Cents(-1),
            }
        });
        Record {
            cex_id: &record.id,
            currency: &record.coin,
            received,
            amount_text: &record.amount,
            network: &record.network,
            address: &record.address,
            tx_id: &record.tx_id,
            state: protocol::classify_status(record.status),
        }
        .status(&self.networks, || {
            format!(
                "Binance withdrawal status {} ({}){}",
                record.status,
                protocol::describe_status(record.status),
                if record.info.is_empty() {
                    String::new()
                } else {
                    format!(": {}", record.info)
                }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_range_without_gaps() {
        assert_eq!(windows(0, 10, 4), vec![(0, 4), (4, 8), (8, 10)]);
        assert_eq!(windows(5, 5, 4), vec![]);
        assert_eq!(units("12.340000"), Some(1_234_000_000));
    }
}
