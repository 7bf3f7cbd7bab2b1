//! What the exchange says about a run's withdrawals, applied to its payouts: answers to sends
//! and look-ups by client withdrawal id, each read through the one outcome model
//! (`exchange::outcome`), and payouts found stuck. Each change commits with its events, audit
//! entries and released holds in one transaction.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use payroll_entities::{Cents, PayoutStatus, job, payout};
use serde_json::json;

use super::{
    deps::RunDeps,
    messages::RunError,
    store::{self, Snapshot},
    transitions::recount,
};
use crate::{
    audit::{self, first_ids, system_entry},
    events::{insert_events, payout_event},
    exchange::{
        RemoteStatus, WithdrawalRequest,
        actor::{Answered, Lookup},
        cut_exchange_text, holds,
        outcome::{Verdict, of_answer, of_lookup},
        parse_client_id, valid_tx_hash,
    },
    telemetry::{self, CountedSend},
};

/// A payout's change learned from the exchange.
enum Change {
    Accepted {
        cex_id: String,
        /// The exchange actor released the attempt's hold as the answer came.
        hold_released: bool,
    },
    Completed {
        cex_id: String,
        tx_hash: String,
        explorer_url: Option<String>,
    },
    Failed {
        cex_id: Option<String>,
        reason: String,
    },
    /// Still unknown after every send allowed, or PROCESSING too long: reported, never sent
    /// again on its own.
    Stuck { why: String },
    /// A look-up did not find it: `lookups` since its last send, counted where only our own
    /// record guards against a second withdrawal.
    Unfound { lookups: i32 },
}

/// What recording exchange answers leaves to do.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Client ids to look up later (accepted, or answered ambiguously).
    pub watch: Vec<String>,
    /// Still pending at the exchange.
    pub still_pending: Vec<String>,
    /// Committed but never sent (no send counted): to send now.
    pub send: Vec<WithdrawalRequest>,
    /// Unknown at the exchange past the grace since their last send: to send once more.
    pub resend: Vec<WithdrawalRequest>,
    /// The exchange gave a clear answer.
    pub reached: bool,
    /// The exchange could not be reached, or gave no clear answer.
    pub unreached: bool,
    /// The exchange refused our credentials: the job cannot go on.
    pub credentials_refused: Option<String>,
}

fn request_of(p: &payout::Model, client_id: &str) -> WithdrawalRequest {
    WithdrawalRequest {
        client_id: client_id.to_owned(),
        amount: Cents(p.amount_usd_cents),
        fee: Cents(p.fee_usd_cents),
        network: p.network,
        address: p.wallet_address.clone(),
    }
}

/// Payout ids of these client ids.
fn payout_ids<'a>(client_ids: impl Iterator<Item = &'a String>) -> Vec<String> {
    client_ids
        .filter_map(|c| parse_client_id(c).map(|(id, _)| id.to_owned()))
        .collect()
}

/// Applies changes to payouts, the run's and job's counters and events, in one transaction.
/// `decide` reads the payouts `wanted` as this transaction holds them and answers the changes.
/// `observed_at`: when the exchange was asked, for changes learned from a look-up. A payout
/// sent after that (a resend that left meanwhile) is not failed on the look-up's word.
async fn apply_changes(
    deps: &RunDeps,
    snapshot: Snapshot,
    wanted: Vec<String>,
    decide: impl FnOnce(&HashMap<String, payout::Model>) -> Vec<(String, Change)>,
    observed_at: Option<DateTime<Utc>>,
) -> Result<Snapshot, RunError> {
    if wanted.is_empty() {
        return Ok(snapshot);
    }
    let Snapshot { run, mut job } = snapshot;
    let tx = deps.db.begin_write().await?;
    let mut payouts = store::payouts_by_id_locked(&*tx, &wanted).await?;
    let changes = decide(&payouts);
    if changes.is_empty() {
        // Nothing was written; a rollback that fails leaves nothing behind either.
        if let Err(err) = tx.rollback().await {
            tracing::warn!(run_id = %run.id, error = %err, "rolling back an empty settlement failed");
        }
        return Ok(Snapshot { run, job });
    }
    // The database's clock, as sends are stamped by it: every instance compares one clock.
    let now = deps.db.clock_now();
    let mut after = run.clone();
    let mut changed = Vec::new();
    let mut events = Vec::new();
    let (mut completed, mut failed) = (Vec::new(), Vec::new());
    let mut stuck = Vec::new();
    let mut ended = Vec::new();
    let in_job_of = |p: &payout::Model, job: &Option<job::Model>| {
        p.job_id.is_some() && p.job_id == job.as_ref().map(|j| j.id.clone())
    };
    for (client_id, change) in changes {
        let Some((payout_id, _)) = parse_client_id(&client_id) else {
            continue;
        };
        let Some(mut p) = payouts.remove(payout_id) else {
            continue;
        };
        let before = p.status;
        // An answer about another attempt than the payout's current one changes nothing.
        if before.is_terminal() || p.client_withdrawal_id.as_deref() != Some(client_id.as_str()) {
            continue;
        }
        let in_job = in_job_of(&p, &job);
        p.updated_at = now;
        let mut hold_released = false;
        let written = match change {
            Change::Accepted {
                cex_id,
                hold_released: released,
            } => {
                if before != PayoutStatus::Pending {
                    continue;
                }
                hold_released = released;
                p.status = PayoutStatus::Processing;
                p.cex_withdrawal_id = Some(cex_id);
                events.push(payout_event("payout.processing", &p));
                store::Settled::Accepted
            }
            Change::Completed {
                cex_id,
                tx_hash,
                explorer_url,
            } => {
                if before == PayoutStatus::Pending {
                    // Accepted and settled since we last heard: both steps are told.
                    p.cex_withdrawal_id = Some(cex_id.clone());
                    p.status = PayoutStatus::Processing;
                    events.push(payout_event("payout.processing", &p));
                }
                p.status = PayoutStatus::Completed;
                p.cex_withdrawal_id = Some(cex_id);
                // Kept only in its chain's form, and the link only from such a hash.
                if valid_tx_hash(p.network, &tx_hash) {
                    p.on_chain_tx_hash = Some(tx_hash);
                    p.block_explorer_url = explorer_url;
                } else {
                    tracing::warn!(payout_id = %p.id, "the exchange gave a transaction hash not in its chain's form; none is kept");
                    p.on_chain_tx_hash = None;
                    p.block_explorer_url = None;
                }
                p.completed_at = Some(now);
                completed.push(p.id.clone());
                events.push(payout_event("payout.completed", &p));
                store::Settled::Completed
            }
            Change::Failed { cex_id, reason } => {
                // A refusal (no exchange id) only ever concerns a withdrawal not yet accepted.
                if cex_id.is_none() && before != PayoutStatus::Pending {
                    continue;
                }
                // Sent again since the exchange was asked: what it said is out of date.
                if let (Some(asked), Some(sent)) = (observed_at, p.last_sent_at)
                    && sent > asked
                {
                    continue;
                }
                p.status = PayoutStatus::Failed;
                if cex_id.is_some() {
                    p.cex_withdrawal_id = cex_id;
                }
                p.failed_reason = Some(cut_exchange_text(&reason));
                failed.push(p.id.clone());
                events.push(payout_event("payout.failed", &p));
                store::Settled::Failed
            }
            Change::Unfound { lookups } => {
                // Sent again since the exchange was asked: the count starts over.
                if let (Some(asked), Some(sent)) = (observed_at, p.last_sent_at)
                    && sent > asked
                {
                    continue;
                }
                p.unfound_lookups = p.unfound_lookups.max(lookups);
                changed.push((p, store::Settled::Unfound));
                continue;
            }
            Change::Stuck { why } => {
                if p.stuck_since.is_some() {
                    continue;
                }
                p.stuck_since = Some(now);
                events.push(payout_event("payout.stuck", &p));
                stuck.push((p.id.clone(), why, p.send_count, client_id.clone()));
                changed.push((p, store::Settled::Stuck));
                continue;
            }
        };
        // Settled: no longer stuck, if it was.
        p.stuck_since = None;
        if before == PayoutStatus::Pending && !hold_released {
            // The attempt's claim on the balance has ended: accepted (the exchange's balance
            // dropped), or failed without a withdrawal. The exchange actor may have released
            // the hold already (told where it says so); releasing again changes nothing.
            let why = match (&p.status, &p.cex_withdrawal_id) {
                (PayoutStatus::Failed, None) => holds::Release::Refused,
                (PayoutStatus::Failed, Some(_)) => holds::Release::Failed,
                _ => holds::Release::Accepted,
            };
            ended.push(((p.id.clone(), p.attempt), why));
        }
        tracing::debug!(payout_id = %p.id, %client_id, before = ?before, after = ?p.status, "payout changed");
        recount(
            &mut after,
            if in_job { job.as_mut() } else { None },
            before,
            p.status,
        );
        changed.push((p, written));
    }
    store::save_settled(&*tx, &changed).await?;
    for why in [
        holds::Release::Accepted,
        holds::Release::Refused,
        holds::Release::Failed,
    ] {
        let attempts: Vec<(String, i32)> = ended
            .iter()
            .filter(|(_, w)| *w == why)
            .map(|(a, _)| a.clone())
            .collect();
        if !attempts.is_empty() {
            holds::release(&*tx, &attempts, why).await?;
        }
    }
    // Look-ups that only missed an id change no count of the run: the run is not written, so
    // its `updated_at` (the last progress operators and alerts watch) stays where it was; its
    // version is still checked, as the write would have, so a stale actor commits nothing.
    if changed
        .iter()
        .any(|(_, written)| !matches!(written, store::Settled::Unfound))
    {
        store::save_run(&*tx, run.version, &mut after).await?;
        if let Some(job) = job.as_mut() {
            store::save_job(&*tx, job).await?;
        }
    } else if !changed.is_empty() {
        store::lock_version(&*tx, &run, |_| Ok(())).await?;
    }
    insert_events(&tx, events).await?;
    if !completed.is_empty() {
        audit::insert(&*tx, system_entry("PAYOUTS_COMPLETED", "payroll_run", &run.id, json!({
            "count": completed.len(), "first_payout_ids": first_ids(completed.iter().map(String::as_str)),
        })))
        .await?;
    }
    if !failed.is_empty() {
        audit::insert(&*tx, system_entry("PAYOUTS_FAILED", "payroll_run", &run.id, json!({
            "count": failed.len(), "first_payout_ids": first_ids(failed.iter().map(String::as_str)),
        })))
        .await?;
    }
    for (payout_id, why, sends, client_id) in &stuck {
        audit::insert(
            &*tx,
            system_entry(
                "PAYOUT_STUCK",
                "payout",
                payout_id,
                json!({"payroll_run_id": run.id, "why": why, "stuck_reason": why, "sends": sends, "client_withdrawal_id": client_id}),
            ),
        )
        .await?;
    }
    tx.commit().await?;
    telemetry::payouts_settled(completed.len(), failed.len());
    if !stuck.is_empty() {
        tracing::warn!(run_id = %run.id, count = stuck.len(), "payouts stuck: an operator resolves them");
        telemetry::stuck_payouts(stuck.len() as u64);
    }
    Ok(Snapshot { run: after, job })
}

/// Records the exchange's answers to withdrawals this run handed over.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id, answers = results.len()))]
pub async fn record_results(
    deps: &RunDeps,
    snapshot: Snapshot,
    results: Vec<Answered>,
) -> Result<(Snapshot, Recorded), RunError> {
    let mut recorded = Recorded::default();
    let mut changes = Vec::new();
    for Answered {
        request,
        outcome,
        sent,
        hold_released,
    } in results
    {
        let Some(payout_id) = parse_client_id(&request.client_id).map(|(id, _)| id.to_owned())
        else {
            continue;
        };
        let client_id = request.client_id;
        match of_answer(sent, &outcome) {
            Verdict::Accepted { cex_id } => {
                recorded.reached = true;
                recorded.watch.push(client_id.clone());
                changes.push((
                    client_id,
                    Change::Accepted {
                        cex_id,
                        hold_released,
                    },
                ));
            }
            Verdict::Refused { reason } => {
                recorded.reached = true;
                let change = Change::Failed {
                    cex_id: None,
                    reason,
                };
                changes.push((client_id, change));
            }
            Verdict::CredentialsRefused { reason } => {
                let change = Change::Failed {
                    cex_id: None,
                    reason: format!("job_failed: the exchange refused our credentials: {reason}"),
                };
                changes.push((client_id, change));
                recorded.credentials_refused = Some(reason);
            }
            Verdict::Unknown { reason } => {
                tracing::warn!(%payout_id, %client_id, %reason, "no clear answer to a withdrawal; it will be looked up");
                recorded.unreached = true;
                recorded.watch.push(client_id);
            }
            // Not sent (a lost lease): whoever holds the run looks it up.
            Verdict::NotSent => recorded.watch.push(client_id),
            Verdict::Completed { .. } | Verdict::Failed { .. } => {}
        }
    }
    let wanted = payout_ids(changes.iter().map(|(c, _)| c));
    let snapshot = apply_changes(deps, snapshot, wanted, |_| changes, None).await?;
    Ok((snapshot, recorded))
}

/// What the exchange knows of these client ids (its history, batched where it allows).
pub async fn look_up(deps: &RunDeps, client_ids: Vec<String>) -> Result<Looked, RunError> {
    let asked_at = deps.db.clock_now();
    let sent_since = if deps.lookups_read_history {
        store::first_sent(&deps.db, &client_ids).await?
    } else {
        None
    };
    let statuses = deps
        .exchange
        .counted_send(Lookup {
            client_ids,
            sent_since,
        })
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))?
        .map_err(RunError::from)?;
    Ok(Looked { statuses, asked_at })
}

/// What a look-up found, and when the exchange was asked.
#[derive(Debug)]
pub struct Looked {
    pub statuses: HashMap<String, RemoteStatus>,
    pub asked_at: DateTime<Utc>,
}

/// Applies what a look-up found (`None`: the exchange could not be asked) to the current
/// attempts of these client ids: settled ones settle; an unknown one is sent now if it never
/// left, again once `exchange.reconcile_grace_ms` has passed since its last send while sends
/// are left (`exchange.max_sends`), and is stuck after that.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id, client_ids = client_ids.len()))]
pub async fn apply_lookup(
    deps: &RunDeps,
    snapshot: Snapshot,
    client_ids: Vec<String>,
    looked: Option<Looked>,
) -> Result<(Snapshot, Recorded), RunError> {
    let Some(Looked { statuses, asked_at }) = looked else {
        let recorded = Recorded {
            unreached: true,
            still_pending: client_ids,
            ..Recorded::default()
        };
        return Ok((snapshot, recorded));
    };
    let wanted = payout_ids(client_ids.iter());
    let decide = |payouts: &HashMap<String, payout::Model>, recorded: &mut Recorded| {
        decide_lookup(deps, asked_at, &statuses, &client_ids, payouts, recorded)
    };
    // A withdrawal the exchange shows settled (completed, or failed) nearly always settles
    // its payout, so then the write transaction is taken at once. Otherwise the look-up is
    // decided first on the payouts as they are, and only where that changes something is the
    // transaction taken (on SQLite, the write lock). Either way what is written is decided on
    // the payouts as the transaction holds them.
    let settled_there = client_ids.iter().any(|c| {
        matches!(
            statuses.get(c),
            Some(RemoteStatus::Completed { .. } | RemoteStatus::Failed { .. })
        )
    });
    if !settled_there {
        let payouts = store::payouts_by_id(&deps.db.conn, &wanted).await?;
        let mut recorded = Recorded::default();
        if decide(&payouts, &mut recorded).is_empty() {
            return Ok((snapshot, recorded));
        }
    }
    let mut recorded = Recorded::default();
    let snapshot = apply_changes(
        deps,
        snapshot,
        wanted,
        |locked| decide(locked, &mut recorded),
        Some(asked_at),
    )
    .await?;
    Ok((snapshot, recorded))
}

/// What a look-up's statuses change on these payouts (as read by the caller), and what is left
/// to do: send, send again, watch. The exchange answered, so it was reached.
fn decide_lookup(
    deps: &RunDeps,
    asked_at: DateTime<Utc>,
    statuses: &HashMap<String, RemoteStatus>,
    client_ids: &[String],
    payouts: &HashMap<String, payout::Model>,
    recorded: &mut Recorded,
) -> Vec<(String, Change)> {
    recorded.reached = true;
    let resends = deps.exchange_settings.resends(deps.client_ids_deduped);
    let grace = Duration::milliseconds(resends.grace_ms as i64);
    let mut changes = Vec::new();
    for client_id in client_ids {
        let Some((payout_id, _)) = parse_client_id(client_id) else {
            continue;
        };
        let Some(p) = payouts.get(payout_id) else {
            continue;
        };
        // Only the current attempt counts.
        if p.client_withdrawal_id.as_deref() != Some(client_id.as_str()) || p.status.is_terminal() {
            continue;
        }
        let status = statuses
            .get(client_id)
            .cloned()
            .unwrap_or(RemoteStatus::Unknown);
        // The exchange's word is checked (CONTRACT §7): a withdrawal it reports under our id
        // that is not what was sent (currency, network, address, amount) never completes the
        // payout; it is stuck for an operator, once.
        if let RemoteStatus::Pending { reported, .. } | RemoteStatus::Completed { reported, .. } =
            &status
            && let Some(wrong) =
                reported.mismatch(Cents(p.amount_usd_cents), p.network, &p.wallet_address)
        {
            if p.stuck_since.is_none() {
                tracing::error!(payout_id = %p.id, %client_id, %wrong, "the exchange reports a withdrawal that is not the one sent");
                changes.push((
                    client_id.clone(),
                    Change::Stuck {
                        why: format!("mismatch: {wrong}"),
                    },
                ));
            }
            recorded.still_pending.push(client_id.clone());
            continue;
        }
        match of_lookup(&status) {
            Verdict::Unknown { .. } => {
                if p.status != PayoutStatus::Pending || p.stuck_since.is_some() {
                    recorded.still_pending.push(client_id.clone());
                    continue;
                }
                // Sends are stamped by the database's clock, and the exchange was asked at
                // `asked_at` by it: the grace is measured from the one to the other.
                let Some(last) = p.last_sent_at else {
                    // Committed, never sent: nothing can exist under it yet.
                    recorded.send.push(request_of(p, client_id));
                    continue;
                };
                let unfound = p.unfound_lookups.saturating_add(1);
                let past_grace = asked_at - last >= grace;
                if !past_grace || unfound < resends.unfound_lookups {
                    if resends.unfound_lookups > 1 && unfound <= resends.unfound_lookups {
                        // Counted until enough look-ups have missed it.
                        changes.push((client_id.clone(), Change::Unfound { lookups: unfound }));
                    }
                    recorded.still_pending.push(client_id.clone());
                } else if p.send_count < resends.max_sends as i32 {
                    recorded.resend.push(request_of(p, client_id));
                } else {
                    let why = format!(
                        "the exchange still does not show it {} ms after the last of {} sends",
                        resends.grace_ms, p.send_count
                    );
                    changes.push((client_id.clone(), Change::Stuck { why }));
                    recorded.still_pending.push(client_id.clone());
                }
            }
            Verdict::Accepted { cex_id } => {
                if p.status == PayoutStatus::Pending {
                    let change = Change::Accepted {
                        cex_id,
                        hold_released: false,
                    };
                    changes.push((client_id.clone(), change));
                }
                recorded.still_pending.push(client_id.clone());
            }
            Verdict::Completed {
                cex_id,
                tx_hash,
                explorer_url,
            } => changes.push((
                client_id.clone(),
                Change::Completed {
                    cex_id,
                    tx_hash,
                    explorer_url,
                },
            )),
            Verdict::Failed { cex_id, reason } => changes.push((
                client_id.clone(),
                Change::Failed {
                    cex_id: Some(cex_id),
                    reason,
                },
            )),
            Verdict::Refused { .. } | Verdict::CredentialsRefused { .. } | Verdict::NotSent => {}
        }
    }
    changes
}

/// Looks these client ids up and records what the exchange says; a look-up that fails leaves
/// them as they are.
pub async fn reconcile(
    deps: &RunDeps,
    snapshot: Snapshot,
    client_ids: Vec<String>,
) -> Result<(Snapshot, Recorded), RunError> {
    if client_ids.is_empty() {
        return Ok((snapshot, Recorded::default()));
    }
    let looked = look_up(deps, client_ids.clone()).await?;
    apply_lookup(deps, snapshot, client_ids, Some(looked)).await
}

/// Marks these payouts stuck: PROCESSING longer than `exchange.stuck_after_ms`.
pub async fn mark_processing_stuck(
    deps: &RunDeps,
    snapshot: Snapshot,
) -> Result<(Snapshot, Recorded), RunError> {
    let since =
        deps.db.clock_now() - Duration::milliseconds(deps.exchange_settings.stuck_after_ms as i64);
    let client_ids = store::processing_since(&deps.db, &snapshot.run.id, since).await?;
    let why = format!(
        "PROCESSING at the exchange for more than {} ms",
        deps.exchange_settings.stuck_after_ms
    );
    let wanted = payout_ids(client_ids.iter());
    let changes = client_ids
        .into_iter()
        .map(|c| (c, Change::Stuck { why: why.clone() }))
        .collect();
    Ok((
        apply_changes(deps, snapshot, wanted, |_| changes, None).await?,
        Recorded::default(),
    ))
}
