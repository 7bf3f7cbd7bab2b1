//! Requests in flight, and the refusal of new ones once the server stops.
//!
//! The HTTP workers are stopped last: each runs its own runtime, and a PostgreSQL connection
//! is bound to the runtime that opened it. A connection a worker opened and returned to the
//! pool fails for whoever uses it after that worker is gone, so the workers outlive every
//! shutdown step that writes (runs settling, leases given up, audit entries written). Until
//! then they answer each new request 503 `SERVICE_UNAVAILABLE` and close its connection.

use std::{
    pin::pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct Drain {
    stopping: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
}

/// A request being served; it is done when this is dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Drain>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Drain {
    /// Counts a request in, or `None` once the server stops.
    pub fn enter(self: &Arc<Self>) -> Option<InFlight> {
        // Counted before the flag is read: a request stop() does not see in flight has not
        // read the flag yet, so it will read it set.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.stopping.load(Ordering::SeqCst) {
            self.leave();
            return None;
        }
        Some(InFlight(self.clone()))
    }

    fn leave(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && self.stopping.load(Ordering::SeqCst)
        {
            self.idle.notify_waiters();
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Refuses requests from now on and waits up to `limit` for those in flight to finish;
    /// false if some still run.
    pub async fn stop(&self, limit: Duration) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        let finished = async {
            loop {
                let mut idle = pin!(self.idle.notified());
                // Registered before the count is read, so a last request leaving in between
                // still wakes this.
                idle.as_mut().enable();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(limit, finished).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_drain_refuses_new_requests() {
        let drain = Arc::new(Drain::default());
        let first = drain.enter();
        assert!(first.is_some());
        drop(first);
        assert!(drain.stop(Duration::from_millis(10)).await);
        assert!(drain.is_stopping());
        assert!(drain.enter().is_none());
        assert_eq!(drain.in_flight.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn stop_waits_for_the_requests_in_flight() {
        let drain = Arc::new(Drain::default());
        let (a, b) = (drain.enter(), drain.enter());
        let released = {
            let drain = drain.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(a);
                assert!(drain.enter().is_none(), "refused while stopping");
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(b);
            })
        };
        assert!(drain.stop(Duration::from_secs(10)).await);
        assert_eq!(drain.in_flight.load(Ordering::SeqCst), 0);
        released.await.expect("released");
    }

    #[tokio::test]
    async fn stop_gives_up_after_its_limit() {
        let drain = Arc::new(Drain::default());
        let _held = drain.enter();
        assert!(!drain.stop(Duration::from_millis(20)).await);
        assert_eq!(drain.in_flight.load(Ordering::SeqCst), 1);
    }
}
