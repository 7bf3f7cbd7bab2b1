//! Query strings: parameters taken one by one so unknown ones are reported, and `limit`/`offset`.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QuerySelect, Select};

use actix_web::web;

use crate::http::error::{ApiError, FieldError};

#[derive(Debug, Default)]
pub struct Query {
    values: HashMap<String, String>,
    errors: Vec<FieldError>,
}

/// `limit` and `offset` of a list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: u64,
    pub offset: u64,
}

impl Query {
    pub fn parse(raw: &str) -> Result<Query, ApiError> {
        let pairs = web::Query::<Vec<(String, String)>>::from_query(raw).map_err(|e| {
            ApiError::query(vec![FieldError::new(
                "",
                format!("malformed query string: {e}"),
            )])
        })?;
        let mut query = Query::default();
        for (key, value) in pairs.into_inner() {
            if query.values.insert(key.clone(), value).is_some() {
                query
                    .errors
                    .push(FieldError::new(key, "given more than once"));
            }
        }
        Ok(query)
    }

    pub fn str(&mut self, name: &str) -> Option<String> {
        self.values.remove(name)
    }

    /// A value that must be one of a closed set.
    pub fn parsed<T>(
        &mut self,
        name: &str,
        parse: impl Fn(&str) -> Option<T>,
        valid: &str,
    ) -> Option<T> {
        let raw = self.values.remove(name)?;
        match parse(&raw) {
            Some(v) => Some(v),
            None => {
                self.errors
                    .push(FieldError::new(name, format!("must be one of {valid}")));
                None
            }
        }
    }

    pub fn bool(&mut self, name: &str) -> Option<bool> {
        self.parsed(
            name,
            |s| match s {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            },
            "true, false",
        )
    }

    pub fn datetime(&mut self, name: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        let raw = self.values.remove(name)?;
        match crate::http::dates::parse_instant(&raw, crate::http::dates::DayEdge::Start) {
            Ok(ts) => Some(ts),
            Err(msg) => {
                self.errors.push(FieldError::new(name, msg));
                None
            }
        }
    }

    fn number(&mut self, name: &str, default: u64, min: u64, max: u64) -> u64 {
        let Some(raw) = self.values.remove(name) else {
            return default;
        };
        match raw.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => n,
            _ => {
                let range = if max == u64::MAX {
                    format!("a whole number of at least {min}")
                } else {
                    format!("a whole number from {min} to {max}")
                };
                self.errors
                    .push(FieldError::new(name, format!("must be {range}")));
                default
            }
        }
    }

    /// `limit` (1–200, default 25) and `offset` (≥ 0, default 0).
    pub fn page(&mut self) -> Page {
        Page {
            limit: self.number("limit", 25, 1, 200),
            offset: self.number("offset", 0, 0, i64::MAX as u64),
        }
    }

    /// Fails with every bad or unknown parameter; `known` names the ones this route takes.
    pub fn finish(mut self, known: &[&str]) -> Result<(), ApiError> {
        let mut unknown: Vec<String> = self.values.into_keys().collect();
        unknown.sort();
        for key in unknown {
            let message = if known.is_empty() {
                "unknown parameter; this operation takes no query parameters".to_owned()
            } else {
                format!("unknown parameter; known ones are {}", known.join(", "))
            };
            self.errors.push(FieldError::new(key, message));
        }
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::query(self.errors))
        }
    }
}

/// One page of `select` (ordered by the caller) and the number of rows it pages through:
/// what every list answer shows.
pub async fn fetch_page<E, C>(
    conn: &C,
    select: Select<E>,
    page: Page,
) -> Result<(Vec<E::Model>, u64), DbErr>
where
    E: EntityTrait,
    E::Model: Sync,
    C: ConnectionTrait,
{
    let total = select.clone().count(conn).await?;
    Ok((page.rows(conn, select).await?, total))
}

impl Page {
    /// The rows of `select` this page holds.
    pub async fn rows<E, C>(self, conn: &C, select: Select<E>) -> Result<Vec<E::Model>, DbErr>
    where
        E: EntityTrait,
        C: ConnectionTrait,
    {
        select.limit(self.limit).offset(self.offset).all(conn).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pages_are_bounded() {
        let mut q = Query::parse("limit=0&offset=-1").expect("parses");
        q.page();
        let err = q.finish(&["limit", "offset"]).expect_err("bad page");
        assert_eq!(
            err.details["validation_errors"].as_array().map(Vec::len),
            Some(2)
        );

        let mut q = Query::parse("limit=200").expect("parses");
        assert_eq!(
            q.page(),
            Page {
                limit: 200,
                offset: 0
            }
        );
        assert!(q.finish(&["limit", "offset"]).is_ok());

        let q = Query::parse("bogus=1").expect("parses");
        assert!(q.finish(&["limit"]).is_err());
    }
}
