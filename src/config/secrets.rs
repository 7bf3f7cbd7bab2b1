//! Secrets in the configuration: which are taken from the environment only, and the `Secret`
//! value that `Debug` never prints.

use config::Config;
use serde::Deserialize;

/// Secrets that are taken from the environment only, with their variables: a config file ends
/// up in backups and version control (CONTRACT §13).
pub(super) const ENV_ONLY: &[(&str, &str)] = &[
    ("exchange.okx.api_key", "PAYROLL__EXCHANGE__OKX__API_KEY"),
    (
        "exchange.okx.secret_key",
        "PAYROLL__EXCHANGE__OKX__SECRET_KEY",
    ),
    (
        "exchange.okx.passphrase",
        "PAYROLL__EXCHANGE__OKX__PASSPHRASE",
    ),
    (
        "exchange.binance.api_key",
        "PAYROLL__EXCHANGE__BINANCE__API_KEY",
    ),
    (
        "exchange.binance.secret_key",
        "PAYROLL__EXCHANGE__BINANCE__SECRET_KEY",
    ),
    ("auth.key_pepper", "PAYROLL__AUTH__KEY_PEPPER"),
    ("email.smtp.password", "PAYROLL__EMAIL__SMTP__PASSWORD"),
];

/// Whether a URL carries a password: `scheme://user:password@host…`, or a `password` query
/// parameter (which the PostgreSQL driver reads too).
fn url_has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let in_userinfo = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let query = rest
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or(q))
        .unwrap_or("");
    let in_query = query.split('&').any(|pair| {
        let name = pair.split('=').next().unwrap_or(pair);
        name.eq_ignore_ascii_case("password")
    });
    in_userinfo || in_query
}

/// Refuses a secret set in a config file (`files`: the layers read so far, before the
/// environment's), naming its key and variable, never its value.
pub(super) fn refuse_in_files(files: &Config) -> Result<(), String> {
    for (key, variable) in ENV_ONLY {
        let set = files
            .get::<config::Value>(key)
            .is_ok_and(|v| v.into_string().map_or(true, |s| !s.is_empty()));
        if set {
            return Err(format!(
                "{key}: a secret; set it in the environment ({variable}), not in a config file"
            ));
        }
    }
    if files
        .get::<String>("database.url")
        .is_ok_and(|url| url_has_password(&url))
    {
        return Err(
            "database.url: it holds a password, a secret; set it in the environment \
                    (PAYROLL__DATABASE__URL), not in a config file"
                .into(),
        );
    }
    Ok(())
}

/// A secret value: usable, but never printed by `Debug`.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "\"[redacted]\""
        })
    }
}

#[cfg(test)]
mod tests {
    use super::url_has_password;

    #[test]
    fn a_password_is_found_in_the_userinfo_and_the_query() {
        for url in [
            "postgres://payroll:hunter2@db/payroll",
            "postgres://payroll@db/payroll?password=hunter2",
            "postgres://payroll@db/payroll?sslmode=require&PASSWORD=hunter2",
        ] {
            assert!(url_has_password(url), "{url}");
        }
        for url in [
            "postgres://payroll@db/payroll",
            "postgres://db/payroll?sslmode=require&passfile=/run/pgpass",
            "sqlite://data/payroll.db?mode=rwc",
        ] {
            assert!(!url_has_password(url), "{url}");
        }
    }
}
