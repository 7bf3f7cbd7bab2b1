//! Multi-row statements: inserts of many rows split so that no statement binds more
//! parameters than SQLite or PostgreSQL accept.

use sea_orm::{
    ActiveModelTrait, ColumnTrait, ColumnType, ConnectionTrait, DatabaseBackend, DbErr,
    EntityTrait, Iden, Iterable, Statement, Value, sea_query::OnConflict,
};

/// Bind parameters per statement: under SQLite's 32,766 and PostgreSQL's 65,535.
const MAX_PARAMETERS: usize = 30_000;

/// Rows of entity `E` per multi-row statement.
pub fn rows_per_statement<E: EntityTrait>() -> usize {
    (MAX_PARAMETERS / E::Column::iter().count().max(1)).max(1)
}

/// The row counts of the statements that insert `total` rows: full statements, then the rest
/// as powers of two. Each distinct count is a distinct prepared statement that a connection
/// keeps in its statement cache, so the counts are kept to a few (at most one per power of
/// two) rather than one per remainder.
fn statement_sizes(total: usize, per_statement: usize) -> Vec<usize> {
    let mut sizes = vec![per_statement; total / per_statement];
    let rest = total % per_statement;
    let mut bit = rest.checked_next_power_of_two().unwrap_or(1);
    while bit > 0 {
        if rest & bit != 0 {
            sizes.push(bit);
        }
        bit >>= 1;
    }
    sizes
}

/// Inserts `rows` in as few statements as the parameter limit allows; with `on_conflict`,
/// each statement carries that clause (an upsert), else as [`insert_models`]. Returns the rows
/// written.
pub async fn insert_chunked<A, C>(
    conn: &C,
    rows: impl IntoIterator<Item = A>,
    on_conflict: Option<&OnConflict>,
) -> Result<u64, DbErr>
where
    A: ActiveModelTrait,
    C: ConnectionTrait,
{
    let Some(on_conflict) = on_conflict else {
        return insert_models(conn, rows).await;
    };
    let per_statement = rows_per_statement::<A::Entity>();
    let rows: Vec<A> = rows.into_iter().collect();
    let mut rows = rows.into_iter();
    let mut written = 0;
    for size in statement_sizes(rows.len(), per_statement) {
        let chunk: Vec<A> = rows.by_ref().take(size).collect();
        let insert =
            <A::Entity as EntityTrait>::insert_many(chunk).on_conflict(on_conflict.clone());
        written += insert.exec_without_returning(conn).await?;
    }
    Ok(written)
}

/// Inserts `rows` (every column) by plain multi-row statements: each value moved out of its
/// model rather than cloned into the statement, and JSON bound as text once serialized (cast
/// to `json` on PostgreSQL). Every column of every row is set (a model made whole); for inserts
/// that need no conflict clause. Returns the rows written.
pub async fn insert_models<A, C>(conn: &C, rows: impl IntoIterator<Item = A>) -> Result<u64, DbErr>
where
    A: ActiveModelTrait,
    C: ConnectionTrait,
{
    let columns: Vec<<A::Entity as EntityTrait>::Column> =
        <A::Entity as EntityTrait>::Column::iter().collect();
    let mut values = Vec::new();
    for mut row in rows {
        let mut row_values = Vec::with_capacity(columns.len());
        for column in &columns {
            row_values.push(match row.take(*column).into_value() {
                Some(Value::Json(json)) => Value::String(json.map(|j| j.to_string())),
                Some(value) => value,
                None => {
                    return Err(DbErr::Custom(format!(
                        "{} not set in a row to insert",
                        column.to_string()
                    )));
                }
            });
        }
        values.push(row_values);
    }
    insert_values::<A::Entity, C>(conn, &columns, values).await
}

/// Inserts `rows` into `columns` of entity `E` by plain multi-row statements, each value bound
/// as given (no model is built or cloned on the way). The values of JSON columns are JSON
/// text, cast to `json` on PostgreSQL (which takes no text for it). Returns the rows written.
pub async fn insert_values<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    columns: &[E::Column],
    rows: Vec<Vec<Value>>,
) -> Result<u64, DbErr> {
    let table = E::default().table_name();
    let backend = conn.get_database_backend();
    let casts: Vec<bool> = columns
        .iter()
        .map(|c| {
            matches!(
                c.def().get_column_type(),
                ColumnType::Json | ColumnType::JsonBinary
            )
        })
        .collect();
    let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let width = columns.len().max(1);
    in_statements(conn, table, width, MAX_PARAMETERS / width, rows, |size| {
        insert_values_sql(backend, table, &columns, &casts, size)
    })
    .await
}

/// Executes `rows` (each `width` values) in statements of a few sizes, at most
/// `per_statement` rows each, the statement of `size` rows written by `sql`. Returns the rows
/// changed.
async fn in_statements<C: ConnectionTrait>(
    conn: &C,
    table: &str,
    width: usize,
    per_statement: usize,
    rows: Vec<Vec<Value>>,
    sql: impl Fn(usize) -> String,
) -> Result<u64, DbErr> {
    let backend = conn.get_database_backend();
    let mut rows = rows.into_iter();
    let mut changed = 0;
    for size in statement_sizes(rows.len(), per_statement.max(1)) {
        let mut values = Vec::with_capacity(size * width);
        for row in rows.by_ref().take(size) {
            if row.len() != width {
                return Err(DbErr::Custom(format!(
                    "a row of {} values for {width} columns of {table}",
                    row.len()
                )));
            }
            values.extend(row);
        }
        changed += conn
            .execute_raw(Statement::from_sql_and_values(backend, sql(size), values))
            .await?
            .rows_affected();
    }
    Ok(changed)
}

fn insert_values_sql(
    backend: DatabaseBackend,
    table: &str,
    columns: &[String],
    json: &[bool],
    rows: usize,
) -> String {
    use std::fmt::Write as _;
    let names: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
    let mut sql = String::with_capacity(64 + rows * columns.len() * 8);
    let _ = write!(
        sql,
        "INSERT INTO \"{table}\" ({}) VALUES ",
        names.join(", ")
    );
    let mut n = 0;
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for (column, is_json) in json.iter().enumerate() {
            if column > 0 {
                sql.push_str(", ");
            }
            n += 1;
            match (backend, is_json) {
                (DatabaseBackend::Postgres, true) => {
                    let _ = write!(sql, "CAST(${n} AS json)");
                }
                (DatabaseBackend::Postgres, false) => {
                    let _ = write!(sql, "${n}");
                }
                _ => sql.push('?'),
            }
        }
        sql.push(')');
    }
    sql
}

/// Rows per `UPDATE … FROM (VALUES …)` statement: enough for a whole window at once.
const UPDATE_ROWS_PER_STATEMENT: usize = 1024;

/// Sets `columns` of many rows of entity `E` to values of their own, found by `key`: one
/// `WITH v AS (VALUES …) UPDATE … FROM v` per statement size instead of one statement per row
/// or an upsert of every column. Each row is its key's value followed by one value per column,
/// in order. Returns the rows changed.
pub async fn update_from_values<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    key: E::Column,
    columns: &[E::Column],
    rows: Vec<Vec<Value>>,
) -> Result<u64, DbErr> {
    let table = E::default().table_name();
    let key = key.to_string();
    let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let backend = conn.get_database_backend();
    let width = columns.len() + 1;
    let per_statement = UPDATE_ROWS_PER_STATEMENT.min(MAX_PARAMETERS / width);
    in_statements(conn, table, width, per_statement, rows, |size| {
        update_from_values_sql(backend, table, &key, &columns, size)
    })
    .await
}

/// The statement of [`update_from_values`] for `rows` rows.
fn update_from_values_sql(
    backend: DatabaseBackend,
    table: &str,
    key: &str,
    columns: &[&str],
    rows: usize,
) -> String {
    use std::fmt::Write as _;
    let width = columns.len() + 1;
    let mut sql = String::with_capacity(64 + rows * width * 6);
    let names: Vec<String> = (0..width).map(|i| format!("c{i}")).collect();
    let _ = write!(sql, "WITH v({}) AS (VALUES ", names.join(", "));
    let mut n = 0;
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..width {
            if column > 0 {
                sql.push_str(", ");
            }
            n += 1;
            match backend {
                DatabaseBackend::Postgres => {
                    let _ = write!(sql, "${n}");
                }
                _ => sql.push('?'),
            }
        }
        sql.push(')');
    }
    let _ = write!(sql, ") UPDATE \"{table}\" SET ");
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(sql, "\"{column}\" = v.c{}", i + 1);
    }
    let _ = write!(sql, " FROM v WHERE \"{table}\".\"{key}\" = v.c0");
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_values_casts_json_text_on_postgres_only() {
        let columns = vec!["id".to_owned(), "data".to_owned()];
        assert_eq!(
            insert_values_sql(
                DatabaseBackend::Postgres,
                "events",
                &columns,
                &[false, true],
                2
            ),
            "INSERT INTO \"events\" (\"id\", \"data\") VALUES ($1, CAST($2 AS json)), ($3, CAST($4 AS json))"
        );
        assert_eq!(
            insert_values_sql(
                DatabaseBackend::Sqlite,
                "events",
                &columns,
                &[false, true],
                1
            ),
            "INSERT INTO \"events\" (\"id\", \"data\") VALUES (?, ?)"
        );
    }

    #[test]
    fn statement_sizes_are_full_statements_then_powers_of_two() {
        assert_eq!(statement_sizes(0, 500), Vec::<usize>::new());
        assert_eq!(statement_sizes(1, 500), vec![1]);
        assert_eq!(statement_sizes(500, 500), vec![500]);
        assert_eq!(
            statement_sizes(1373, 500),
            vec![500, 500, 256, 64, 32, 16, 4, 1]
        );
        for total in 0..2000 {
            let sizes = statement_sizes(total, 500);
            assert_eq!(sizes.iter().sum::<usize>(), total);
            assert!(
                sizes
                    .iter()
                    .all(|&s| s == 500 || (s.is_power_of_two() && s < 500))
            );
        }
    }

    #[test]
    fn update_from_values_numbers_its_placeholders() {
        let sql = update_from_values_sql(DatabaseBackend::Postgres, "t", "id", &["a", "b"], 2);
        assert_eq!(
            sql,
            "WITH v(c0, c1, c2) AS (VALUES ($1, $2, $3), ($4, $5, $6)) UPDATE \"t\" SET \"a\" = v.c1, \"b\" = v.c2 FROM v WHERE \"t\".\"id\" = v.c0"
        );
        let sql = update_from_values_sql(DatabaseBackend::Sqlite, "t", "id", &["a"], 1);
        assert_eq!(
            sql,
            "WITH v(c0, c1) AS (VALUES (?, ?)) UPDATE \"t\" SET \"a\" = v.c1 FROM v WHERE \"t\".\"id\" = v.c0"
        );
    }

    #[test]
    fn statements_stay_under_the_parameter_limit() {
        let rows = rows_per_statement::<crate::payout::Entity>();
        let columns = <crate::payout::Entity as EntityTrait>::Column::iter().count();
        assert!(rows * columns <= MAX_PARAMETERS);
        assert!(rows >= 500, "{rows} rows per statement");
    }
}
