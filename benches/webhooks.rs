//! Webhook benchmark: 100,000 `payout.processing` events, each with a delivery to a live local
//! receiver that answers 200 at once and to a dead endpoint beside it that accepts connections
//! and never answers. The events and their deliveries are written first (as run transitions
//! write them); then the release server starts and the time until every live delivery is
//! SUCCEEDED is measured. Prints figures; asserts nothing.
//!
//! ```sh
//! cargo bench --bench webhooks                          # SQLite
//! PAYROLL_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1/bench cargo bench --bench webhooks
//! ```
//! `PAYROLL_BENCH_EVENTS` changes the count (default 100000); `PAYROLL_BENCH_NO_DEAD=1` leaves
//! the dead endpoint out, for comparison.

mod common;

use common::{drop_schema, fresh_schema, peak_mb, spawn_server};

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actix_web::{App, HttpResponse, HttpServer, web};
use payroll::config::Settings;
use payroll_actors::{
    events::{NewEvent, insert_events},
    webhook::{secret_box::SecretBox, signing::generate_secret},
};
use payroll_entities::{
    DeliveryStatus, WebhookStatus, ids, time, webhook_delivery, webhook_endpoint,
};
use sea_orm::{ColumnTrait, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter};
use serde_json::json;

fn main() {
    let count: usize = std::env::var("PAYROLL_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dead = std::env::var("PAYROLL_BENCH_NO_DEAD").is_err();
    let mut targets: Vec<(&str, Option<String>)> = vec![("sqlite", None)];
    if let Ok(url) = std::env::var("PAYROLL_BENCH_DATABASE_URL") {
        targets.push(("postgres", Some(url)));
    }
    actix_web::rt::System::new().block_on(async move {
        for (name, url) in targets {
            if let Err(err) = run(name, url, count, dead).await {
                eprintln!("{name}: {err:#}");
                std::process::exit(1);
            }
        }
    });
}

/// A receiver answering 200 at once, counting what it got.
fn live_receiver(received: Arc<AtomicU64>) -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let data = web::Data::new(received);
    let server = HttpServer::new(move || {
        App::new().app_data(data.clone()).default_service(web::to(
            |counter: web::Data<Arc<AtomicU64>>, _body: web::Bytes| async move {
                counter.fetch_add(1, Ordering::Relaxed);
                HttpResponse::Ok().finish()
            },
        ))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    actix_web::rt::spawn(server);
    Ok(port)
}

/// A listener that accepts connections and never answers.
async fn dead_receiver() -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    actix_web::rt::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Ok(port)
}

async fn run(name: &str, base_url: Option<String>, count: usize, dead: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut settings = Settings::defaults()?;
    settings.data.dir = dir.path().to_path_buf();
    if let Some(url) = &base_url {
        settings.database.url = payroll::config::Secret::new(fresh_schema(url).await?);
    }
    let received = Arc::new(AtomicU64::new(0));
    let live_port = live_receiver(received.clone())?;
    let dead_port = dead_receiver().await?;

    // Endpoints and events, written as the service writes them.
    let pepper = payroll::startup::load_pepper(&settings)?;
    let sealer = SecretBox::from_pepper(pepper.expose().as_bytes())?;
    let db = payroll::startup::connect_and_migrate(&settings).await?;
    let now = time::now();
    let mut urls = vec![format!("http://127.0.0.1:{live_port}/hook")];
    if dead {
        urls.push(format!("http://127.0.0.1:{dead_port}/hook"));
    }
    let mut endpoint_ids = Vec::new();
    for url in urls {
        let id = ids::new_id(ids::IdKind::Webhook);
        webhook_endpoint::Entity::insert(
            webhook_endpoint::Model {
                id: id.clone(),
                url,
                events: json!(["payout.processing"]),
                description: None,
                status: WebhookStatus::Active,
                disabled_reason: None,
                disabled_at: None,
                secret: sealer.seal(&generate_secret())?,
                previous_secret: None,
                previous_secret_expires_at: None,
                created_by_key_id: None,
                created_at: now,
                updated_at: now,
                deleted_at: None,
            }
            .into_active_model(),
        )
        .exec_without_returning(&db.conn)
        .await?;
        endpoint_ids.push(id);
    }
    let seeding = Instant::now();
    for chunk_start in (0..count).step_by(1000) {
        let events: Vec<NewEvent> = (chunk_start..(chunk_start + 1000).min(count))
            .map(|i| {
                let payout_id = ids::new_id(ids::IdKind::Payout);
                NewEvent {
                    id: ids::new_id(ids::IdKind::Event),
                    event_type: "payout.processing".into(),
                    resource_id: payout_id.clone(),
                    created_at: now,
                    data: json!({"object": {
                        "id": payout_id, "payroll_run_id": "run_01JBENCH00000000000000000",
                        "employee_id": format!("emp_{i}"), "employee_name": format!("Employee {i}"),
                        "employee_email": format!("employee{i}@example.com"), "status": "PROCESSING",
                        "is_test_run": false, "amount_usd_cents": 250_000, "fee_usd_cents": 0,
                        "test_run_deduction_usd_cents": 0, "stablecoin": "USDC", "network": "BASE",
                        "wallet_address": format!("0x{:040x}", i + 1), "note": null, "attempt": 1,
                        "client_withdrawal_id": format!("{payout_id}-1"), "cex_withdrawal_id": format!("sbx_{i}"),
                        "on_chain_tx_hash": null, "block_explorer_url": null, "failed_reason": null,
                        "initiated_at": time::format(&now), "completed_at": null,
                        "created_at": time::format(&now), "updated_at": time::format(&now)
                    }})
                    .to_string(),
                }
            })
            .collect();
        let tx = db.begin_write().await?;
        insert_events(&tx, events).await?;
        tx.commit().await?;
    }
    let seeded = seeding.elapsed();

    let (mut child, _port) = spawn_server(
        dir.path(),
        &settings.database_url(),
        &[
            ("PAYROLL__WEBHOOKS__ALLOW_HTTP", "true"),
            ("PAYROLL__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true"),
        ],
    )?;
    let started = Instant::now();
    let live = endpoint_ids[0].clone();
    let done = loop {
        let succeeded = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EndpointId.eq(live.as_str()))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Succeeded))
            .count(&db.conn)
            .await?;
        if succeeded as usize >= count {
            break started.elapsed();
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "only {succeeded} of {count} delivered"
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    let dead_attempts = if dead {
        webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_ids[1].as_str()))
            .filter(webhook_delivery::Column::AttemptCount.gt(0))
            .count(&db.conn)
            .await?
    } else {
        0
    };
    let peak = peak_mb(child.id());
    child.kill().ok();
    child.wait().ok();
    db.conn.clone().close().await.ok();
    drop_schema(&settings.database_url()).await?;
    println!(
        "{name:<9} events={count:<7} seeded={:>6.2}s  start_to_all_delivered={:>7.2}s ({:.0} deliveries/s)  received={}  dead_endpoint={}  dead_attempts_recorded={dead_attempts}  peak_rss={peak:.0} MB",
        seeded.as_secs_f64(),
        done.as_secs_f64(),
        count as f64 / done.as_secs_f64(),
        received.load(Ordering::Relaxed),
        if dead { "yes" } else { "no" },
    );
    Ok(())
}
