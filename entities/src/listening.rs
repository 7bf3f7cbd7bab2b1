//! Telling a PostgreSQL server that went away from a slow one, at once.
//!
//! A pool retries a connection the server refuses (sqlx takes it for a server starting up)
//! until the pool's deadline, so a probe through a pool whose connections died waits out that
//! deadline before it can say the server is gone. A probe that has not answered shortly is
//! raced here against one plain connection, which fails at once where nothing listens.

use std::{future::Future, sync::Arc, time::Duration};

use sea_orm::{
    DbErr, RuntimeErr,
    sqlx::{
        Connection as _, Error,
        postgres::{PgConnectOptions, PgConnection},
    },
};

/// How long a probe may take before a plain connection asks whether anything listens: longer
/// than a probe of a server that is there takes, so that one is rarely opened.
const ASK_AFTER: Duration = Duration::from_millis(50);

/// `probe`'s answer, or an error as soon as a plain connection to the PostgreSQL server of
/// `url` is refused: nothing listens there. Any other outcome of that connection (it works,
/// the server is starting up) leaves the answer to `probe`; without a `url`, so does all.
pub async fn unless_refused(
    url: Option<&str>,
    probe: impl Future<Output = Result<(), DbErr>>,
) -> Result<(), DbErr> {
    let Some(url) = url else {
        return probe.await;
    };
    let refused = async {
        tokio::time::sleep(ASK_AFTER).await;
        match refusal(url).await {
            Some(err) => DbErr::Conn(RuntimeErr::SqlxError(Arc::new(err))),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        answer = probe => answer,
        err = refused => Err(err),
    }
}

/// The error of one plain connection to `url` if the connection was refused. A URL sqlx
/// cannot read is left to the pool, which reports it.
async fn refusal(url: &str) -> Option<Error> {
    let options = url.parse::<PgConnectOptions>().ok()?;
    match PgConnection::connect_with(&options).await {
        Ok(conn) => {
            conn.close().await.ok();
            None
        }
        Err(Error::Io(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
            Some(Error::Io(err))
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback port nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    }

    #[tokio::test]
    async fn a_refused_connection_answers_before_a_probe_that_waits() {
        let url = format!("postgres://nobody@127.0.0.1:{}/none", closed_port());
        let waiting = std::future::pending::<Result<(), DbErr>>();
        let answer =
            tokio::time::timeout(Duration::from_secs(5), unless_refused(Some(&url), waiting))
                .await
                .expect("answered before the probe");
        let err = answer.expect_err("refused");
        assert!(
            matches!(&err, DbErr::Conn(RuntimeErr::SqlxError(e))
                if matches!(&**e, Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_probe_that_answers_soon_is_the_answer() {
        let url = format!("postgres://nobody@127.0.0.1:{}/none", closed_port());
        assert!(unless_refused(Some(&url), async { Ok(()) }).await.is_ok());
        // Without a URL nothing is raced: the probe's own answer, however it ends.
        let failed = unless_refused(None, async { Err(DbErr::Custom("its own".into())) }).await;
        assert!(matches!(failed, Err(DbErr::Custom(why)) if why == "its own"));
    }
}
