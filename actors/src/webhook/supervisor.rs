//! The webhook supervisor (CONTRACT §10). It finds endpoints with due deliveries (after every
//! commit that wrote some, and by a periodic scan) and keeps one `WebhookDispatcher` per such
//! endpoint. A slow or dead endpoint only fills its own dispatcher; all of them run on an
//! arbiter of their own, apart from the run actors.

use std::{collections::HashMap, time::Duration};

use actix::prelude::*;

use crate::runtime::{ArbiterGuard, InRuntime};

use super::{
    dispatcher::{Reload, Retire, Wake, WebhookDispatcher},
    http::build_client,
    settings::WebhookDeps,
    store,
};
use crate::outage::Outage;
use crate::telemetry::{self, ActorKind, CountedSend, Handling, Observed};

/// How often the supervisor looks for due deliveries on its own.
const SCAN_INTERVAL: Duration = Duration::from_secs(2);

pub struct WebhookSupervisor {
    deps: WebhookDeps,
    client: Option<awc::Client>,
    dispatchers: HashMap<String, Addr<WebhookDispatcher>>,
    scanning: bool,
    again: bool,
    /// Scans that failed on the database: logged once an outage.
    outage: Outage,
}

impl WebhookSupervisor {
    pub fn new(deps: WebhookDeps) -> WebhookSupervisor {
        WebhookSupervisor {
            deps,
            client: None,
            dispatchers: HashMap::new(),
            scanning: false,
            again: false,
            outage: Outage::new("webhook scan failed"),
        }
    }

    /// Starts the supervisor on an arbiter (thread) of its own and has every commit that writes
    /// deliveries tell it. The arbiter stops when the returned guard is dropped.
    pub fn start_on_own_arbiter(deps: WebhookDeps) -> (Addr<WebhookSupervisor>, ArbiterGuard) {
        let db = deps.db.clone();
        let (addr, guard) = ArbiterGuard::start_actor(move || WebhookSupervisor::new(deps));
        let notify = addr.downgrade();
        db.after_commit(move |endpoint_ids| {
            if let Some(addr) = notify.upgrade() {
                addr.counted_do_send(DeliveriesCommitted { endpoint_ids });
            }
        });
        (addr, guard)
    }

    fn dispatcher(
        &mut self,
        endpoint_id: &str,
        ctx: &mut Context<Self>,
    ) -> Addr<WebhookDispatcher> {
        if let Some(addr) = self.dispatchers.get(endpoint_id)
            && addr.connected()
        {
            return addr.clone();
        }
        let client = self
            .client
            .get_or_insert_with(|| build_client(&self.deps.settings))
            .clone();
        let addr = WebhookDispatcher::new(
            endpoint_id.to_owned(),
            self.deps.clone(),
            client,
            ctx.address().recipient(),
        )
        .start();
        self.dispatchers
            .insert(endpoint_id.to_owned(), addr.clone());
        addr
    }

    /// Wakes the dispatcher of every endpoint with a due delivery (with `all`, every endpoint
    /// with a pending one, so their timers are armed after a restart).
    fn scan(&mut self, all: bool, ctx: &mut Context<Self>) {
        if self.scanning {
            self.again = true;
            return;
        }
        self.scanning = true;
        let db = self.deps.db.clone();
        let fut = async move { store::endpoints_with_pending(&db, all).await };
        ctx.spawn(fut.in_runtime().into_actor(self).map(|found, act, ctx| {
            act.scanning = false;
            match found {
                Ok(endpoints) => {
                    act.outage.succeeded();
                    for endpoint_id in endpoints {
                        act.dispatcher(&endpoint_id, ctx).counted_do_send(Wake);
                    }
                }
                Err(e) => {
                    act.outage.failed(&e);
                }
            }
            if std::mem::take(&mut act.again) {
                act.scan(false, ctx);
            }
        }));
    }
}

impl Actor for WebhookSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        self.client = Some(build_client(&self.deps.settings));
        self.scan(true, ctx);
        ctx.run_interval(SCAN_INTERVAL, |act, ctx| act.scan(false, ctx));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for WebhookSupervisor {
    const KIND: ActorKind = ActorKind::WebhookSupervisor;
}

/// New deliveries for these endpoints were committed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DeliveriesCommitted {
    pub endpoint_ids: Vec<String>,
}

impl Handler<DeliveriesCommitted> for WebhookSupervisor {
    type Result = ();

    fn handle(&mut self, msg: DeliveriesCommitted, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "DeliveriesCommitted");
        for endpoint_id in msg.endpoint_ids {
            self.dispatcher(&endpoint_id, ctx).counted_do_send(Wake);
        }
    }
}

/// Something changed for one endpoint (a delivery to retry now, a new secret, deletion).
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointChanged {
    pub endpoint_id: String,
}

impl Handler<EndpointChanged> for WebhookSupervisor {
    type Result = ();

    #[tracing::instrument(skip_all, fields(endpoint_id = %msg.endpoint_id))]
    fn handle(&mut self, msg: EndpointChanged, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "EndpointChanged");
        self.dispatcher(&msg.endpoint_id, ctx)
            .counted_do_send(Reload);
    }
}

impl Handler<Retire> for WebhookSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Retire, _: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Retire");
        if self.dispatchers.get(&msg.endpoint_id) == Some(&msg.addr) {
            self.dispatchers.remove(&msg.endpoint_id);
        }
    }
}
