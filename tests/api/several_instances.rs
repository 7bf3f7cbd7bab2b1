//! Several instances, one truth (CONTRACT §13), on a private PostgreSQL cluster: instances
//! started together on an empty database all start (migrations take a lock); two instances
//! executing one run at once give one execution and a 409, never a 500; an instance whose
//! clock is ten minutes ahead does not take a lease another instance holds (leases expire by
//! the database's clock).

use std::time::{Duration, Instant};

use payroll_entities::{email_outbox, job, run_lease};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::Value;

use crate::{
    instances::{confirmed_run, deposit, wait_completed},
    pg_cluster::{self, PgCluster},
    process::{Setup, db},
};

#[actix_web::test]
async fn instances_started_together_on_an_empty_database_all_start() {
    let Some(bin) = pg_cluster::available() else {
        return;
    };
    let cluster = PgCluster::start(bin).await;
    let setup = Setup::bare(Some(cluster.url()));
    // At once, before any has migrated the empty database.
    let mut servers: Vec<_> = (1..=3).map(|n| setup.spawn(n, &[])).collect();
    for (i, server) in servers.iter().enumerate() {
        setup.wait_ready(server, i + 1).await;
    }
    for (i, server) in servers.iter_mut().enumerate() {
        assert!(
            server.child.try_wait().expect("wait").is_none(),
            "instance {} exited: {}",
            i + 1,
            setup.log(i + 1)
        );
    }
}

#[actix_web::test]
async fn two_instances_executing_one_run_at_once_make_one_execution_and_a_409() {
    let Some(bin) = pg_cluster::available() else {
        return;
    };
    let cluster = PgCluster::start(bin).await;
    let setup = Setup::on_database(Some(cluster.url())).await;
    let first = setup.start(1).await;
    let second = setup.start(2).await;
    setup.import_employees(&first, "race", 30, "BASE").await;
    let database = db(&cluster.url()).await;
    for month in 1..=4 {
        let (run_id, total) = confirmed_run(&setup, &first, &second, month).await;
        setup.fund(&first, total).await;
        deposit(&setup, &second, &run_id).await;
        let path = format!("/payroll-runs/{run_id}/execute");
        // As a client does: a 503 (the run was being reloaded on that instance, nothing
        // changed) is tried again after its Retry-After.
        let execute = |server| {
            let (setup, path) = (&setup, &path);
            async move {
                let mut tries = 0;
                loop {
                    let answer = setup.try_call(server, "POST", path, None).await;
                    tries += 1;
                    if answer.0 != 503 || tries == 10 {
                        return answer;
                    }
                    actix_web::rt::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let (a, b) = futures_util::future::join(execute(&first), execute(&second)).await;
        let mut answers: Vec<(u16, Value)> = vec![a, b];
        answers.sort_by_key(|(status, _)| *status);
        assert_eq!(
            answers.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![200, 409],
            "run {run_id}: {answers:?}\n--- logs:\n{}\n{}",
            setup.log(1),
            setup.log(2)
        );
        let refusal = &answers[1].1["error"];
        assert_eq!(
            refusal["code"],
            "INVALID_STATUS_TRANSITION",
            "{refusal}\n--- logs:\n{}\n{}",
            setup.log(1),
            setup.log(2)
        );
        assert_eq!(refusal["details"]["current_status"], "PAYING_OUT");
        // One execution: one job, one email per payout.
        let jobs = job::Entity::find()
            .filter(job::Column::PayrollRunId.eq(run_id.as_str()))
            .count(&database.conn)
            .await
            .expect("jobs");
        assert_eq!(jobs, 1, "run {run_id}");
        let emails = email_outbox::Entity::find()
            .filter(email_outbox::Column::PayoutId.starts_with("pay_"))
            .count(&database.conn)
            .await
            .expect("emails");
        assert_eq!(emails, 30 * u64::from(month), "one email per payout");
        // Paid before the next is funded: a balance check on one instance while another pays
        // out can count a withdrawal the exchange took and whose hold is not yet released.
        wait_completed(&setup, &first, &run_id, 60).await;
    }
}

/// CONTRACT §16: an approval decided on two instances at once is carried out once: one
/// decision wins (200), the other is 409 `APPROVAL_CLOSED`; one job, one withdrawal per payout.
#[actix_web::test]
async fn an_approval_decided_on_two_instances_at_once_is_carried_out_once() {
    let Some(bin) = pg_cluster::available() else {
        return;
    };
    let cluster = PgCluster::start(bin).await;
    let setup = Setup::on_database(Some(cluster.url())).await;
    let first = setup.start(1).await;
    let second = setup.start(2).await;
    setup.import_employees(&first, "approve", 10, "BASE").await;
    let database = db(&cluster.url()).await;
    let (run_id, total) = confirmed_run(&setup, &first, &second, 1).await;
    setup.fund(&first, total).await;
    deposit(&setup, &second, &run_id).await;
    let session = setup
        .call(
            &first,
            "POST",
            "/agent-sessions",
            Some(serde_json::json!({"description": "agent", "scopes": ["payroll:read", "payroll:execute"]})),
        )
        .await;
    let token = session["data"]["token"].as_str().expect("token").to_owned();
    let (status, held) = setup
        .try_call_as(
            &token,
            &second,
            "POST",
            &format!("/payroll-runs/{run_id}/execute"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{held}");
    let approve = format!(
        "/approvals/{}/approve",
        held["data"]["id"].as_str().expect("approval")
    );
    // Two people, one on each instance.
    let other = setup
        .call(
            &first,
            "POST",
            "/api-keys",
            Some(serde_json::json!({"name": "second approver", "scopes": ["payroll:approve"]})),
        )
        .await;
    let other = other["data"]["key"].as_str().expect("key").to_owned();
    let (a, b) = futures_util::future::join(
        setup.try_call(&first, "POST", &approve, None),
        setup.try_call_as(&other, &second, "POST", &approve, None),
    )
    .await;
    let mut answers = vec![a, b];
    answers.sort_by_key(|(status, _)| *status);
    assert_eq!(
        answers.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![200, 409],
        "{answers:?}"
    );
    assert_eq!(answers[0].1["data"]["status"], "APPROVED", "{answers:?}");
    assert_eq!(
        answers[1].1["error"]["code"], "APPROVAL_CLOSED",
        "{answers:?}"
    );
    wait_completed(&setup, &first, &run_id, 60).await;
    let jobs = job::Entity::find()
        .filter(job::Column::PayrollRunId.eq(run_id.as_str()))
        .count(&database.conn)
        .await
        .expect("jobs");
    assert_eq!(jobs, 1);
    assert_eq!(crate::process::withdrawn(&database).await, 10);
}

/// The instance whose clock runs ten minutes ahead reads every lease as expired by its own
/// clock; by the database's, it finds the lease held and leaves the run to its holder.
#[actix_web::test]
async fn an_instance_with_a_clock_ahead_does_not_take_a_held_lease() {
    let Some(bin) = pg_cluster::available() else {
        return;
    };
    let Some(faketime) = libfaketime() else {
        return;
    };
    let cluster = PgCluster::start(bin).await;
    let setup = Setup::on_database(Some(cluster.url()))
        .await
        .with_env("PAYROLL__RUNS__FUNDS_WATCH_INTERVAL_MS", "3600000");
    let first = setup.start(1).await;
    setup.import_employees(&first, "clock", 5, "BASE").await;
    // A CONFIRMED run is worked (its funds watched) by the instance that confirmed it.
    let (run_id, _) = confirmed_run(&setup, &first, &first, 5).await;
    let database = db(&cluster.url()).await;
    let holder = lease_owner(&database, &run_id).await;
    assert!(
        holder.is_some(),
        "the confirming instance holds the run's lease"
    );

    let ahead = setup.spawn(
        2,
        &[
            ("LD_PRELOAD", faketime.as_str()),
            ("FAKETIME", "+600s"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    setup.wait_ready(&ahead, 2).await;
    // Its clock is ahead: the Date of its answers says so.
    let res = awc::Client::default()
        .get(format!("{}/healthz", ahead.base))
        .send()
        .await
        .expect("healthz");
    let date = res
        .headers()
        .get("date")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| chrono::DateTime::parse_from_rfc2822(v).ok())
        .expect("a Date header");
    let ahead_by = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        ahead_by > chrono::Duration::seconds(500),
        "the clock is not ahead: {ahead_by}"
    );
    // Several heartbeats of both (the lease lasts 1.5 s, renewed every 0.5 s).
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(
            lease_owner(&database, &run_id).await,
            holder,
            "the instance with a clock ahead took the lease\n--- log:\n{}",
            setup.log(2)
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lease_owner(database: &payroll_entities::db::Db, run_id: &str) -> Option<String> {
    run_lease::Entity::find_by_id(run_id.to_owned())
        .one(&database.conn)
        .await
        .expect("lease")
        .map(|l| l.owner)
}

/// libfaketime (Debian's `faketime`), which `.ci/run` installs: it moves a process's clock.
fn libfaketime() -> Option<String> {
    let path = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    if std::path::Path::new(path).exists() {
        return Some(path.to_owned());
    }
    assert!(
        std::env::var("PAYROLL_REQUIRE_FAKETIME").as_deref() != Ok("1"),
        "PAYROLL_REQUIRE_FAKETIME=1 but libfaketime is not installed (Debian's faketime)"
    );
    eprintln!("NOTICE: libfaketime is not installed; the clock-skew test is skipped");
    None
}
