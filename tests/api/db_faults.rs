//! The database fails while two instances pay a run and a client writes (CONTRACT §4, §13
//! "Infrastructure faults"): a private PostgreSQL cluster is crashed three times, has every
//! connection cut, and stays down for 30 s. Throughout, no request is answered 500; the first
//! 503 comes within 2 s of the fault, every 503 within 2 s of its request; both instances are
//! ready within 10 s of the database's return; the run completes with one withdrawal per
//! payout; every acknowledged write is there, every write retried under its key is there once,
//! and every acknowledged request has its audit entry.

use std::{
    cell::RefCell,
    collections::{HashMap, HashSet},
    rc::Rc,
    time::{Duration, Instant},
};

use payroll_entities::{audit_entry, employee};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, TransactionTrait,
};
use serde_json::{Value, json};

use crate::{
    helpers::{evm_address, new_key},
    instances::{assert_paid_exactly_once, confirmed_run, deposit},
    pg_cluster::{self, PgCluster},
    process::{Server, Setup, db},
};

/// What one request got.
struct Seen {
    at: Instant,
    took: Duration,
    status: u16,
    what: String,
}

#[derive(Default)]
struct Traffic {
    seen: Vec<Seen>,
    /// Request ids of 2xx answers.
    acknowledged: Vec<String>,
    /// Emails of employees whose creation was acknowledged.
    written: Vec<String>,
    /// Writes retried under their key at least once.
    retried: HashSet<String>,
    /// Answers no test expects (a 500, a refusal of a valid write).
    unexpected: Vec<String>,
}

/// One request: status, request id and body, or why none came.
async fn request(
    client: &awc::Client,
    base: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    idempotency_key: Option<&str>,
) -> Result<(u16, String, Value), String> {
    let method = awc::http::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let mut req = client
        .request(method, format!("{base}/api/v1{path}"))
        .insert_header(("Authorization", format!("Bearer {key}")));
    if let Some(k) = idempotency_key {
        req = req.insert_header(("Idempotency-Key", k));
    }
    let sent = match body {
        Some(body) => req.send_json(body).await,
        None => req.send().await,
    };
    let mut res = sent.map_err(|e| e.to_string())?;
    let request_id = res
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = res.body().limit(1 << 20).await.map_err(|e| e.to_string())?;
    Ok((
        res.status().as_u16(),
        request_id,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish()
}

/// Creates employees one after another until told to stop, each under its own key, sent to
/// the instances in turn; a 503 or an in-use key is retried under the same key (on the other
/// instance), until the write is acknowledged.
fn spawn_writer(
    key: String,
    bases: Vec<String>,
    traffic: Rc<RefCell<Traffic>>,
    stop: Rc<std::cell::Cell<bool>>,
) -> actix_web::rt::task::JoinHandle<()> {
    actix_web::rt::spawn(async move {
        let client = client();
        let mut n = 0usize;
        while !stop.get() {
            let email = format!("w{n}@example.com");
            let body = json!({"name": format!("Writer {n}"), "email": email,
                "salary_usd_cents": 1000, "network": "BASE", "wallet_address": evm_address(&email)});
            let idempotency_key = new_key();
            for attempt in 0usize.. {
                let base = &bases[(n + attempt) % bases.len()];
                let started = Instant::now();
                let answer = request(
                    &client,
                    base,
                    &key,
                    "POST",
                    "/employees",
                    Some(&body),
                    Some(&idempotency_key),
                )
                .await;
                let took = started.elapsed();
                let written = {
                    let mut t = traffic.borrow_mut();
                    match answer {
                        Ok((status, request_id, json)) => {
                            t.seen.push(Seen {
                                at: started,
                                took,
                                status,
                                what: format!("POST /employees ({email})"),
                            });
                            match status {
                                200 | 201 => {
                                    t.acknowledged.push(request_id);
                                    t.written.push(email.clone());
                                    if attempt > 0 {
                                        t.retried.insert(email.clone());
                                    }
                                    true
                                }
                                // Refused, or the key's rate limit: sent again under its key.
                                503 | 429 => false,
                                409 if json["error"]["code"] == "IDEMPOTENCY_KEY_IN_USE" => false,
                                _ => {
                                    t.unexpected.push(format!(
                                        "POST /employees ({email}): {status} {json}"
                                    ));
                                    true
                                }
                            }
                        }
                        Err(err) => {
                            t.unexpected
                                .push(format!("POST /employees ({email}): {err}"));
                            false
                        }
                    }
                };
                if written {
                    break;
                }
                actix_web::rt::time::sleep(Duration::from_millis(100)).await;
            }
            n += 1;
            // About 30 writes a second, within the key's rate limit beside the reader.
            actix_web::rt::time::sleep(Duration::from_millis(30)).await;
        }
    })
}

/// Reads the run from each instance in turn, every 50 ms, until told to stop; every third
/// request is a sync, which the run's actor answers (a run whose actor failed while the
/// database was away must never be answered 404).
fn spawn_reader(
    key: String,
    bases: Vec<String>,
    run_id: String,
    traffic: Rc<RefCell<Traffic>>,
    stop: Rc<std::cell::Cell<bool>>,
) -> actix_web::rt::task::JoinHandle<()> {
    actix_web::rt::spawn(async move {
        let client = client();
        let path = format!("/payroll-runs/{run_id}");
        for n in 0usize.. {
            if stop.get() {
                break;
            }
            let base = &bases[n % bases.len()];
            let sync = format!("{path}/sync");
            let (method, target, key_header) = if n % 3 == 2 {
                ("POST", sync.as_str(), Some(new_key()))
            } else {
                ("GET", path.as_str(), None)
            };
            let started = Instant::now();
            let answer = request(
                &client,
                base,
                &key,
                method,
                target,
                None,
                key_header.as_deref(),
            )
            .await;
            let took = started.elapsed();
            let what = format!("{method} {target}");
            {
                let mut t = traffic.borrow_mut();
                match answer {
                    Ok((status, request_id, json)) => {
                        t.seen.push(Seen {
                            at: started,
                            took,
                            status,
                            what: what.clone(),
                        });
                        match status {
                            200 => t.acknowledged.push(request_id),
                            503 => {}
                            _ => t.unexpected.push(format!("{what}: {status} {json}")),
                        }
                    }
                    Err(err) => t.unexpected.push(format!("{what}: {err}")),
                }
            }
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// How long until both instances answer `/readyz` 200.
async fn time_to_ready(servers: &[&Server]) -> Duration {
    let client = client();
    let started = Instant::now();
    loop {
        let mut ready = 0;
        for server in servers {
            if let Ok(res) = client.get(format!("{}/readyz", server.base)).send().await
                && res.status() == 200
            {
                ready += 1;
            }
        }
        if ready == servers.len() || started.elapsed() > Duration::from_secs(60) {
            return started.elapsed();
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The faults of one scenario, applied while the run pays out.
enum Fault {
    /// `count` crashes, each down for `down`.
    Crashes { count: usize, down: Duration },
    /// Every connection cut, the server left running.
    Reset,
}

async fn scenario(name: &str, fault: Fault, payouts: usize) {
    let Some(bin) = pg_cluster::available() else {
        return;
    };
    let cluster = PgCluster::start(bin).await;
    let setup = Setup::on_database(Some(cluster.url()))
        .await
        .with_env("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "25");
    let first = setup.start(1).await;
    let second = setup.start(2).await;
    setup
        .import_employees(&first, "fault", payouts, "BASE")
        .await;
    let (run_id, total) = confirmed_run(&setup, &first, &second, 4).await;
    setup.fund(&second, total).await;
    deposit(&setup, &first, &run_id).await;
    let executed_at = Instant::now();
    setup.run_step(&first, &run_id, "execute").await;

    let traffic = Rc::new(RefCell::new(Traffic::default()));
    let stop = Rc::new(std::cell::Cell::new(false));
    let bases = vec![first.base.clone(), second.base.clone()];
    let writer = spawn_writer(
        setup.key.clone(),
        bases.clone(),
        traffic.clone(),
        stop.clone(),
    );
    let reader = spawn_reader(
        setup.key.clone(),
        bases,
        run_id.clone(),
        traffic.clone(),
        stop.clone(),
    );

    let mut faults: Vec<Instant> = Vec::new();
    let mut ready_after: Vec<Duration> = Vec::new();
    let crashes = matches!(fault, Fault::Crashes { .. });
    match fault {
        Fault::Crashes { count, down } => {
            for _ in 0..count {
                actix_web::rt::time::sleep(Duration::from_secs(2)).await;
                faults.push(Instant::now());
                cluster.crash().await;
                actix_web::rt::time::sleep(down).await;
                cluster.start_server().await;
                ready_after.push(time_to_ready(&[&first, &second]).await);
            }
        }
        Fault::Reset => {
            actix_web::rt::time::sleep(Duration::from_secs(2)).await;
            faults.push(Instant::now());
            cluster.terminate_connections().await;
            ready_after.push(time_to_ready(&[&first, &second]).await);
        }
    }

    // The run goes on by itself and completes.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (status, body) = setup
            .try_call(&first, "GET", &format!("/payroll-runs/{run_id}"), None)
            .await;
        if status == 200 && body["data"]["status"] == "COMPLETED" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: run not completed: {status} {body}\n--- logs:\n{}\n{}\n--- database:\n{}",
            setup.log(1),
            setup.log(2),
            cluster.log()
        );
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
    }
    let paid_in = executed_at.elapsed();
    stop.set(true);
    writer.await.ok();
    reader.await.ok();
    // The audit entries of the last reads are written within the flush interval.
    actix_web::rt::time::sleep(Duration::from_millis(2500)).await;

    let traffic = traffic.take();
    let log = || format!("--- logs:\n{}\n{}", setup.log(1), setup.log(2));
    assert!(
        traffic.unexpected.is_empty(),
        "{name}: unexpected answers: {:#?}\n{}",
        traffic.unexpected,
        log()
    );
    assert!(
        traffic.seen.iter().all(|s| s.status != 500),
        "{name}: a 500 was answered\n{}",
        log()
    );
    let mut by_status: HashMap<u16, usize> = HashMap::new();
    for s in &traffic.seen {
        *by_status.entry(s.status).or_default() += 1;
    }
    // Every 503 within 2 s of its request: none waited out the pool's timeout.
    let slowest_refusal = traffic
        .seen
        .iter()
        .filter(|s| s.status == 503)
        .map(|s| s.took)
        .max()
        .unwrap_or_default();
    // When each began, against the fault before it.
    let when = |s: &Seen| {
        faults
            .iter()
            .enumerate()
            .rev()
            .find(|(_, f)| s.at >= **f)
            .map_or("before the first fault".to_owned(), |(i, f)| {
                format!("{:?} after fault {i}", s.at.duration_since(*f))
            })
    };
    let slow: Vec<String> = traffic
        .seen
        .iter()
        .filter(|s| s.status == 503 && s.took > Duration::from_secs(2))
        .map(|s| format!("{} took {:?}, begun {}", s.what, s.took, when(s)))
        .collect();
    assert!(
        slow.is_empty(),
        "{name}: slow refusals: {slow:?}\n{}",
        log()
    );
    let mut first_refusals = Vec::new();
    for (i, at) in faults.iter().enumerate() {
        let first = traffic
            .seen
            .iter()
            .filter(|s| s.status == 503 && s.at + s.took >= *at)
            .map(|s| (s.at + s.took).duration_since(*at))
            .min();
        // A reset may pass unseen: the next connection works at once.
        if crashes {
            let first = first.unwrap_or_else(|| panic!("{name}: no 503 after fault {i}"));
            assert!(
                first <= Duration::from_secs(2),
                "{name}: the first 503 after fault {i} came after {first:?}"
            );
        }
        first_refusals.push(first);
    }
    for (i, ready) in ready_after.iter().enumerate() {
        assert!(
            *ready <= Duration::from_secs(10),
            "{name}: the instances were ready {ready:?} after recovery {i}\n{}",
            log()
        );
    }

    // One withdrawal per payout, money conserved.
    let database = db(&cluster.url()).await;
    assert_paid_exactly_once(&database, total).await;
    // Every acknowledged write is there, once.
    let emails: Vec<String> = employee::Entity::find()
        .select_only()
        .column(employee::Column::Email)
        .filter(employee::Column::Email.like("w%@example.com"))
        .into_tuple()
        .all(&database.conn)
        .await
        .expect("employees");
    let mut count: HashMap<&str, usize> = HashMap::new();
    for e in &emails {
        *count.entry(e.as_str()).or_default() += 1;
    }
    for email in &traffic.written {
        assert_eq!(
            count.get(email.as_str()),
            Some(&1),
            "{name}: acknowledged write {email} not there exactly once"
        );
    }
    assert_eq!(emails.len(), traffic.written.len(), "{name}: writes");
    // Every acknowledged request has its audit entry.
    let mut missing = Vec::new();
    for chunk in traffic.acknowledged.chunks(500) {
        let found: HashSet<String> = audit_entry::Entity::find()
            .select_only()
            .column(audit_entry::Column::RequestId)
            .filter(audit_entry::Column::RequestId.is_in(chunk.to_vec()))
            .into_tuple::<Option<String>>()
            .all(&database.conn)
            .await
            .expect("audit")
            .into_iter()
            .flatten()
            .collect();
        missing.extend(chunk.iter().filter(|id| !found.contains(*id)).cloned());
    }
    assert!(
        missing.is_empty(),
        "{name}: {} acknowledged requests without an audit entry: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let mut statuses: Vec<(u16, usize)> = by_status.into_iter().collect();
    statuses.sort();
    eprintln!(
        "FIGURES {name}: payouts {payouts}, paid in {:.1} s; first 503 after each fault {:?}; \
         slowest 503 {:?}; ready after each recovery {:?}; statuses {statuses:?}; \
         writes acknowledged {} ({} retried under their key); requests acknowledged {}",
        paid_in.as_secs_f64(),
        first_refusals,
        slowest_refusal,
        ready_after,
        traffic.written.len(),
        traffic.retried.len(),
        traffic.acknowledged.len(),
    );
}

#[actix_web::test]
async fn three_crashes_while_two_instances_pay_and_a_client_writes() {
    scenario(
        "three crashes",
        Fault::Crashes {
            count: 3,
            down: Duration::from_secs(3),
        },
        400,
    )
    .await;
}

#[actix_web::test]
async fn every_connection_reset_while_two_instances_pay_and_a_client_writes() {
    scenario("connection reset", Fault::Reset, 300).await;
}

#[actix_web::test]
async fn a_thirty_second_outage_while_two_instances_pay_and_a_client_writes() {
    scenario(
        "30 s outage",
        Fault::Crashes {
            count: 1,
            down: Duration::from_secs(30),
        },
        300,
    )
    .await;
}

/// A write under way when the database crashes is answered 503 as soon as the instance knows
/// the database unreachable, not when the database returns: releasing the write's idempotency
/// claim (so that a retry is carried out at once) waits for the database in the background.
/// The retry under the same key once it is back creates the employee once.
#[actix_web::test]
async fn a_write_under_way_when_the_database_crashes_is_answered_while_it_is_down() {
    let Some(bin) = pg_cluster::available() else {
        return;
    };
    let cluster = PgCluster::start(bin).await;
    // One pooled connection: the write's, lost with the crash, so releasing its claim needs a
    // new one, which the pool tries to open until its acquire timeout (10 s).
    let setup = Setup::on_database(Some(cluster.url()))
        .await
        .with_env("PAYROLL__DATABASE__MAX_CONNECTIONS", "1");
    let server = setup.start(1).await;

    // The write waits on a lock another connection holds, so it is under way at the crash.
    let locker = db(&cluster.url()).await;
    let lock = locker.conn.begin().await.expect("transaction");
    lock.execute_unprepared("LOCK TABLE employees IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let email = "crash@example.com";
    let body = json!({"name": "Crash", "email": email, "salary_usd_cents": 1000,
        "network": "BASE", "wallet_address": evm_address(email)});
    let idempotency_key = new_key();
    let write = {
        let (base, key, body, idempotency_key) = (
            server.base.clone(),
            setup.key.clone(),
            body.clone(),
            idempotency_key.clone(),
        );
        actix_web::rt::spawn(async move {
            request(
                &client(),
                &base,
                &key,
                "POST",
                "/employees",
                Some(&body),
                Some(&idempotency_key),
            )
            .await
        })
    };
    actix_web::rt::time::sleep(Duration::from_millis(1500)).await;
    assert!(!write.is_finished(), "the write did not wait on the lock");
    let crashed_at = Instant::now();
    cluster.crash().await;
    drop(lock);
    let (status, _, answer) = write.await.expect("task").expect("answer");
    let answered_after = crashed_at.elapsed();
    assert_eq!(status, 503, "{answer}\n--- log:\n{}", setup.log(1));
    assert_eq!(answer["error"]["details"]["reason"], "database", "{answer}");
    // Cut short, the write cannot be said not to have landed: the retry under its key tells.
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("unless its commit had just gone through"),
        "{answer}"
    );
    assert!(
        answer["error"]["recovery_hint"]
            .as_str()
            .is_some_and(|h| h.contains("same Idempotency-Key")),
        "{answer}"
    );
    assert!(
        answered_after < Duration::from_secs(2),
        "answered {answered_after:?} after the crash, with the database still down\n--- log:\n{}",
        setup.log(1)
    );

    actix_web::rt::time::sleep(Duration::from_secs(2)).await;
    cluster.start_server().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let created = loop {
        let (status, _, answer) = request(
            &client(),
            &server.base,
            &setup.key,
            "POST",
            "/employees",
            Some(&body),
            Some(&idempotency_key),
        )
        .await
        .expect("answer");
        if status == 201 {
            break answer;
        }
        assert!(
            matches!(status, 503 | 409) && Instant::now() < deadline,
            "the retry: {status} {answer}\n--- log:\n{}",
            setup.log(1)
        );
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(created["data"]["email"], email, "{created}");
    let stored = employee::Entity::find()
        .filter(employee::Column::Email.eq(email))
        .all(&locker.conn)
        .await
        .expect("employees");
    assert_eq!(stored.len(), 1, "{stored:?}");
}
