//! `kill -9` during execution: the server process is killed at several points while a run of a
//! few hundred payouts is paid, restarted on the same database, and the sandbox exchange must
//! show every payout withdrawn exactly once and the run completed.

use std::time::{Duration, Instant};

use payroll_entities::{payout, sandbox_withdrawal};
use sea_orm::EntityTrait;

use crate::process::{Setup, db, withdrawn};

const PAYOUTS: usize = 300;

/// Pays a run of `PAYOUTS` payouts, killing the server once `kill_after` withdrawals reached
/// the exchange (0: right after execute answered), then checks exactly-once on a restart.
async fn pay_through_a_crash(kill_after: u64) {
    let setup = Setup::new().await;
    let first = setup.start(1).await;
    setup
        .import_employees(&first, "crash", PAYOUTS, "ARBITRUM")
        .await;
    let (run_id, total) = setup.create_run(&first, 3).await;
    setup.run_step(&first, &run_id, "confirm").await;
    setup.fund(&first, total).await;
    let check = setup.run_step(&first, &run_id, "balance-check").await;
    assert_eq!(check["data"]["run_status"], "DEPOSITED");
    setup.run_step(&first, &run_id, "execute").await;

    let database = db(&setup.database_url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while withdrawn(&database).await < kill_after {
        assert!(
            Instant::now() < deadline,
            "withdrawals did not start: {}",
            setup.log(1)
        );
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    let mut first = first;
    first.child.kill().expect("kill -9");
    first.child.wait().expect("reaped");
    let at_kill = withdrawn(&database).await;

    let second = setup.start(2).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let finished = loop {
        let run = setup.run_step(&second, &run_id, "sync").await;
        if run["data"]["status"] == "COMPLETED" {
            break run;
        }
        assert!(
            Instant::now() < deadline,
            "run not completed after restart (killed at {at_kill}): {run}\n{}",
            setup.log(2)
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        finished["data"]["payout_summary"]["completed"],
        PAYOUTS as i64
    );

    // At the exchange: one withdrawal per payout, under its first attempt's id, for its amount.
    let withdrawals = sandbox_withdrawal::Entity::find()
        .all(&database.conn)
        .await
        .expect("withdrawals");
    assert_eq!(withdrawals.len(), PAYOUTS, "killed at {at_kill}");
    let payouts = payout::Entity::find()
        .all(&database.conn)
        .await
        .expect("payouts");
    for p in &payouts {
        assert_eq!(p.attempt, 1);
        let id = format!("{}-1", p.id);
        let matching: Vec<_> = withdrawals.iter().filter(|w| w.client_id == id).collect();
        assert_eq!(
            matching.len(),
            1,
            "payout {} withdrawn {} times",
            p.id,
            matching.len()
        );
        assert_eq!(matching[0].amount_usd_cents, p.amount_usd_cents);
        assert_eq!(
            p.cex_withdrawal_id.as_deref(),
            Some(matching[0].id.as_str())
        );
    }
    let paid: i64 = withdrawals.iter().map(|w| w.amount_usd_cents).sum();
    assert_eq!(paid, total, "money conserved");
    drop(second);
}

#[actix_web::test]
async fn kill_right_after_execute() {
    pay_through_a_crash(0).await;
}

#[actix_web::test]
async fn kill_after_the_first_withdrawal() {
    pay_through_a_crash(1).await;
}

#[actix_web::test]
async fn kill_midway() {
    pay_through_a_crash(150).await;
}

#[actix_web::test]
async fn kill_near_the_end() {
    pay_through_a_crash(280).await;
}
