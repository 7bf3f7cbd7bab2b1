//! What instances sharing a PostgreSQL database tell each other, heard on one listening
//! connection per instance:
//!
//! - `payroll_api_keys`: a key revoked or rotated (its hash); every instance forgets it
//!   ([`super::key_cache`]).
//! - `payroll_run_changes_<schema hash>`: a statement changed a run or a job of this schema,
//!   announced by a trigger in the writing transaction (migration `m20261125_000001`). PostgreSQL queues announcements in
//!   commit order and delivers them in that order.
//! - this instance's own read barrier: a read that wants to serve a run view kept here first
//!   has a token announced on a channel only this instance listens to, and waits to hear it
//!   back. Everything committed before the token was announced was announced before it, so
//!   once the token is heard every change acknowledged before the read began has been counted
//!   ([`RunChanges::generation`]). Reads waiting at once share one token. The token is
//!   announced on the listening connection itself, which hears its own announcement as its
//!   statement completes, after every announcement committed before it: one round trip to
//!   one PostgreSQL process, with no other connection to wake in between.
//!
//! Whenever the channel is lost and opened again, whatever was said meanwhile may have been
//! missed: every key is forgotten and every view retired.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use sea_orm::sqlx::{
    self, PgPool,
    postgres::{PgListener, PgPoolOptions},
};
use tokio::sync::{Notify, watch};

use super::key_cache::{KEY_CHANNEL, VerifiedKeys};

/// The channel run and job changes of this service's schema are announced on (by the trigger
/// of migration `m20261125_000001`, which names it the same way).
const RUN_CHANNEL_SQL: &str = "SELECT 'payroll_run_changes_' || left(md5(current_schema()), 16)";

/// How long a read waits for its barrier before it reads the database instead.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the listener checks that no read found the channel dead.
const CHANNEL_CHECK: Duration = Duration::from_secs(1);

/// Run and job changes heard from every instance, and this instance's read barriers.
pub struct RunChanges {
    /// Changes heard, plus one each time the channel is opened: a view read at one value is
    /// current while the value is unchanged.
    generation: AtomicU64,
    /// Whether the channel is open (a barrier can be heard).
    open: AtomicBool,
    /// This instance's barrier channel.
    channel: String,
    tokens: Mutex<Tokens>,
    /// The last barrier token heard back.
    heard: watch::Sender<u64>,
    /// Wakes the listener to announce a token.
    wanted: Notify,
}

#[derive(Default)]
struct Tokens {
    /// The last token a read waits for.
    wanted: u64,
    /// The last token taken for announcing.
    issued: u64,
}

impl RunChanges {
    /// For the instance `instance_id`: its barrier channel is named after it.
    pub fn new(instance_id: &str) -> RunChanges {
        let suffix: String = instance_id
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        RunChanges {
            generation: AtomicU64::new(0),
            open: AtomicBool::new(false),
            channel: format!("payroll_barrier_{suffix}"),
            tokens: Mutex::new(Tokens::default()),
            heard: watch::Sender::new(0),
            wanted: Notify::new(),
        }
    }

    fn tokens(&self) -> std::sync::MutexGuard<'_, Tokens> {
        // Two counters; a panicking holder cannot leave them half-written.
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The generation of run changes once every change committed before this call has been
    /// heard; `None` when that cannot be known now (the channel is down, or the barrier took
    /// longer than a second): the caller reads the database and keeps nothing.
    pub async fn generation(&self) -> Option<u64> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let mut heard = self.heard.subscribe();
        // A token taken before now may already be on its way: wait for the next one.
        let need = {
            let mut tokens = self.tokens();
            let need = tokens.issued + 1;
            tokens.wanted = tokens.wanted.max(need);
            need
        };
        self.wanted.notify_one();
        match tokio::time::timeout(BARRIER_TIMEOUT, heard.wait_for(|h| *h >= need)).await {
            Ok(Ok(_)) => Some(self.generation.load(Ordering::Acquire)),
            _ => {
                // The channel may be dead without a word (a half-open connection): reads go
                // to the database from now on, and the listener opens the channel anew.
                if self.open.swap(false, Ordering::AcqRel) {
                    tracing::warn!(
                        "a read barrier was not heard back within a second; listening anew"
                    );
                }
                None
            }
        }
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The channel is open again: what was said while it was down is treated as a change, and
    /// reads waiting for a token that may have been lost go on (they read after this).
    fn opened(&self) {
        self.changed();
        self.open.store(true, Ordering::Release);
        let issued = self.tokens().issued;
        self.heard.send_modify(|h| *h = (*h).max(issued));
    }

    fn closed(&self) {
        self.open.store(false, Ordering::Release);
        self.changed();
    }

    fn heard_token(&self, payload: &str) {
        if let Ok(token) = payload.parse::<u64>() {
            self.heard.send_modify(|h| *h = (*h).max(token));
        }
    }

    /// The next token to announce, if a read waits for one not yet taken.
    fn take_token(&self) -> Option<u64> {
        let mut tokens = self.tokens();
        (tokens.wanted > tokens.issued).then(|| {
            tokens.issued += 1;
            tokens.issued
        })
    }
}

/// Announces a barrier token on the listening connection. The announcement is not made
/// durable (nothing depends on it after a crash), so it does not wait for the disk. No answer
/// within the barrier's time and the channel is given up (a half-open connection says
/// nothing); reads waiting for it read the database meanwhile.
async fn announce(listener: &mut PgListener, channel: &str, token: u64) -> Result<(), String> {
    tokio::time::timeout(
        BARRIER_TIMEOUT,
        sqlx::query("SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)")
            .bind(channel)
            .bind(token.to_string())
            .execute(listener),
    )
    .await
    .map_err(|_| "a read barrier was not announced within a second".to_owned())?
    .map_err(|err| format!("a read barrier could not be announced: {err}"))?;
    Ok(())
}

/// A pool of one connection for the listener, apart from the service's pool and named after
/// the run channel it listens on (`application_name` `payroll listener
/// payroll_run_changes_…`), so that `pg_stat_activity` tells it and its schema apart. Given up,
/// its connection is closed with it rather than returned, still named, to the service's pool.
fn listener_pool(pool: &PgPool, run_channel: &str) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .application_name(&format!("payroll listener {run_channel}"));
    PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options)
}

/// Completes once a read has found the channel dead (its barrier not heard back in time).
async fn found_dead(runs: &RunChanges) {
    let mut check = tokio::time::interval(CHANNEL_CHECK);
    loop {
        check.tick().await;
        if !runs.open.load(Ordering::Acquire) {
            return;
        }
    }
}

/// Listens to every instance's announcements for as long as the process runs; after a failure
/// it opens the channel again a second later. Spawn it `in_runtime` (a listener dropped with
/// no runtime current panics in sqlx's clean-up).
pub async fn listen(pool: PgPool, keys: Arc<VerifiedKeys>, runs: Arc<RunChanges>) {
    let mut outage = payroll_actors::outage::Outage::new("announcements are not heard now");
    loop {
        let listening: Result<std::convert::Infallible, String> = async {
            let failed = |err: sqlx::Error| err.to_string();
            let run_channel: String = sqlx::query_scalar(RUN_CHANNEL_SQL)
                .fetch_one(&pool)
                .await
                .map_err(failed)?;
            let own = listener_pool(&pool, &run_channel);
            let mut listener = PgListener::connect_with(&own).await.map_err(failed)?;
            // A lost connection is never replaced inside the listener: a barrier announced on a
            // connection opened there, unseen by this loop, would be heard back although what
            // was said while no connection listened was lost. Lost, this loop gives the channel
            // up (reads go to the database) and opens it anew.
            listener.eager_reconnect(false);
            listener
                .listen_all([KEY_CHANNEL, run_channel.as_str(), runs.channel.as_str()])
                .await
                .map_err(failed)?;
            // Whatever changed before the channel was open is forgotten too.
            keys.forget_all();
            runs.opened();
            outage.succeeded();
            loop {
                // Told before the token is looked for, so a read that wants one meanwhile is not
                // missed.
                let wanted = runs.wanted.notified();
                if let Some(token) = runs.take_token() {
                    // Heard back with the statement's answer, and received below first.
                    announce(&mut listener, &runs.channel, token).await?;
                }
                // What was heard is received first; a receive is cut short only by a read
                // wanting a token (nothing is taken from the connection until a message is
                // whole) or when the channel is given up anyway.
                let note = tokio::select! {
                    biased;
                    note = listener.try_recv() => note.map_err(failed)?,
                    () = wanted => continue,
                    () = found_dead(&runs) => {
                        return Err("a read barrier was not heard back".to_owned());
                    }
                };
                match note {
                    Some(note) if note.channel() == KEY_CHANNEL => keys.forget(note.payload()),
                    Some(note) if note.channel() == run_channel => runs.changed(),
                    Some(note) => runs.heard_token(note.payload()),
                    // Lost: what was said meanwhile is lost, and the channel is opened anew
                    // below (as closed, then open again).
                    None => return Err("the listening connection was lost".to_owned()),
                }
            }
        }
        .await;
        runs.closed();
        keys.forget_all();
        let Err(err) = listening;
        // Logged once an outage (the database away), then tried again every second.
        outage.failed(&format!("{err}; listening again in a second"));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_waits_for_a_token_taken_after_it_began() {
        let runs = Arc::new(RunChanges::new("inst_01ABC"));
        assert_eq!(runs.channel, "payroll_barrier_inst01abc");
        // Closed: nothing can be known.
        assert_eq!(runs.generation().await, None);
        runs.opened();
        // Token 1 is taken (on its way) before the read begins: the read needs token 2.
        runs.tokens().wanted = 1;
        runs.tokens().issued = 1;
        let reader = tokio::spawn({
            let runs = runs.clone();
            async move { runs.generation().await }
        });
        tokio::task::yield_now().await;
        runs.heard_token("1");
        runs.changed();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !reader.is_finished(),
            "token 1 was taken before the read began"
        );
        assert_eq!(runs.tokens().wanted, 2);
        runs.heard_token("2");
        assert_eq!(reader.await.expect("reader"), Some(2));
    }

    #[tokio::test]
    async fn a_barrier_not_heard_back_in_time_closes_the_channel() {
        let runs = RunChanges::new("i");
        runs.opened();
        assert_eq!(runs.generation().await, None, "no token came back");
        assert!(!runs.open.load(Ordering::Acquire));
        // Later reads go to the database at once, until the channel is opened again.
        let began = std::time::Instant::now();
        assert_eq!(runs.generation().await, None);
        assert!(began.elapsed() < BARRIER_TIMEOUT);
        found_dead(&runs).await;
    }

    #[tokio::test]
    async fn opening_again_counts_as_a_change_and_releases_waiting_reads() {
        let runs = Arc::new(RunChanges::new("i"));
        runs.opened();
        let before = runs.generation.load(Ordering::Acquire);
        let reader = tokio::spawn({
            let runs = runs.clone();
            async move { runs.generation().await }
        });
        tokio::task::yield_now().await;
        // The reader's token was taken, then lost with the channel.
        runs.tokens().issued += 1;
        runs.opened();
        let after = reader.await.expect("reader");
        assert_eq!(after, Some(before + 1));
        runs.closed();
        assert_eq!(runs.generation().await, None);
    }
}
