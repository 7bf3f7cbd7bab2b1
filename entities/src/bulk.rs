//! Multi-row statements: inserts of many rows split so that no statement binds more
//! parameters than SQLite or PostgreSQL accept.

use sea_orm::{
    ActiveModelTrait, ColumnTrait, ColumnType, ConnectionTrait, DatabaseBackend, DbErr,
    EntityTrait, Iden, Iterable, Statement, Value,
    sea_query::{ArrayType, OnConflict},
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
    let (columns, values) = model_rows(rows)?;
    insert_values_then::<A::Entity, C>(conn, &columns, values, "").await
}

/// As [`insert_models`], leaving out each row whose `unique` column holds a value the table
/// has (`ON CONFLICT (unique) DO NOTHING`). Returns the rows written.
pub async fn insert_models_skipping_conflicts<A, C>(
    conn: &C,
    rows: impl IntoIterator<Item = A>,
    unique: <A::Entity as EntityTrait>::Column,
) -> Result<u64, DbErr>
where
    A: ActiveModelTrait,
    C: ConnectionTrait,
{
    let (columns, values) = model_rows(rows)?;
    let suffix = format!(" ON CONFLICT (\"{}\") DO NOTHING", unique.to_string());
    insert_values_then::<A::Entity, C>(conn, &columns, values, &suffix).await
}

/// Every column of each model (made whole), its values moved out, JSON as text.
#[allow(clippy::type_complexity)]
fn model_rows<A: ActiveModelTrait>(
    rows: impl IntoIterator<Item = A>,
) -> Result<(Vec<<A::Entity as EntityTrait>::Column>, Vec<Vec<Value>>), DbErr> {
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
    Ok((columns, values))
}

/// Inserts `rows` into `columns` of entity `E` by plain multi-row statements, each value bound
/// as given (no model is built or cloned on the way). The values of JSON columns are JSON
/// text, cast to `json` on PostgreSQL (which takes no text for it). Returns the rows written.
pub async fn insert_values<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    columns: &[E::Column],
    rows: Vec<Vec<Value>>,
) -> Result<u64, DbErr> {
    insert_values_then::<E, C>(conn, columns, rows, "").await
}

/// [`insert_values`], each statement ending in `suffix` (a conflict clause).
async fn insert_values_then<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    columns: &[E::Column],
    rows: Vec<Vec<Value>>,
    suffix: &str,
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
    let rows = if backend == DatabaseBackend::Postgres {
        match as_columnar(rows, width, &casts) {
            Ok(chunks) => {
                let names: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
                return execute_columnar(conn, chunks, |chunk| {
                    insert_columnar_sql(table, &names, chunk, suffix)
                })
                .await;
            }
            Err(rows) => rows,
        }
    } else {
        rows
    };
    in_statements(conn, table, width, MAX_PARAMETERS / width, rows, |size| {
        insert_values_sql(backend, table, &columns, &casts, size) + suffix
    })
    .await
}

/// `column IN (values)` for text values: on PostgreSQL `column = ANY($1)` with the values as
/// one array, so the statement's text (and the plan a connection keeps for it) is the same
/// whatever their count; on SQLite the usual list.
pub fn one_of<C: ColumnTrait>(
    backend: DatabaseBackend,
    column: C,
    values: impl IntoIterator<Item = String>,
) -> sea_orm::sea_query::Expr {
    use sea_orm::sea_query::{Expr, ExprTrait as _, extension::postgres::PgFunc};
    match backend {
        DatabaseBackend::Postgres => Expr::col(column.as_column_ref()).eq(PgFunc::any(Expr::val(
            Value::from(values.into_iter().collect::<Vec<String>>()),
        ))),
        _ => column.is_in(values),
    }
}

/// Rows per statement whose rows travel as arrays: a bound on one statement's size, not a
/// limit of the database's (one array a column, whatever the count of rows).
const ARRAY_ROWS_PER_STATEMENT: usize = 4096;

/// What a column's values travel as on PostgreSQL: one array of them, the array's SQL type, and
/// the value an array holds where the row has NULL (the row's NULL is then told by a `bool[]`
/// beside it). None for kinds of value no array carries here.
fn array_kind_of(value: &Value) -> Option<(ArrayType, &'static str)> {
    Some(match value {
        Value::String(_) => (ArrayType::String, "text[]"),
        Value::BigInt(_) => (ArrayType::BigInt, "int8[]"),
        Value::Int(_) => (ArrayType::Int, "int4[]"),
        Value::Bool(_) => (ArrayType::Bool, "bool[]"),
        Value::ChronoDateTimeUtc(_) => (ArrayType::ChronoDateTimeUtc, "timestamptz[]"),
        _ => return None,
    })
}

/// Whether a value of a kind an array carries is NULL.
fn is_null(value: &Value) -> bool {
    matches!(
        value,
        Value::String(None)
            | Value::BigInt(None)
            | Value::Int(None)
            | Value::Bool(None)
            | Value::ChronoDateTimeUtc(None)
    )
}

/// The value an array holds in place of a NULL of this kind.
fn stand_in(kind: &ArrayType) -> Value {
    match kind {
        ArrayType::BigInt => Value::BigInt(Some(0)),
        ArrayType::Int => Value::Int(Some(0)),
        ArrayType::Bool => Value::Bool(Some(false)),
        ArrayType::ChronoDateTimeUtc => {
            Value::ChronoDateTimeUtc(Some(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH))
        }
        _ => Value::String(Some(String::new())),
    }
}

/// Rows bound as one array a column (PostgreSQL): the statement reads them as
/// `UNNEST($1::text[], …) AS u(c0, …)`, whose text is the same whatever the count of rows, so
/// it is parsed and planned once a connection.
struct Columnar {
    /// The arrays, in the order of their placeholders.
    arrays: Vec<Value>,
    /// For each column, the SQL of its value in a row (`u.c0`, or a `CASE` where it may be
    /// NULL).
    picks: Vec<String>,
    /// `UNNEST(…) AS u(…)`.
    from: String,
}

/// `rows` (each `width` values) as chunks of at most [`ARRAY_ROWS_PER_STATEMENT`] rows bound as
/// arrays, or given back whole where a column's values are not all of one kind an array
/// carries. The columns of `json` are JSON text, cast to `json`.
fn as_columnar(
    rows: Vec<Vec<Value>>,
    width: usize,
    json: &[bool],
) -> Result<Vec<Columnar>, Vec<Vec<Value>>> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let Some(kinds) = first
        .iter()
        .map(array_kind_of)
        .collect::<Option<Vec<_>>>()
        .filter(|k| k.len() == width)
    else {
        return Err(rows);
    };
    let uniform = rows.iter().all(|row| {
        row.len() == width
            && row
                .iter()
                .zip(&kinds)
                .all(|(v, (kind, _))| array_kind_of(v).is_some_and(|(k, _)| k == *kind))
    });
    if !uniform {
        return Err(rows);
    }
    let nullable: Vec<bool> = (0..width)
        .map(|c| rows.iter().any(|row| is_null(&row[c])))
        .collect();
    let mut chunks = Vec::with_capacity(rows.len().div_ceil(ARRAY_ROWS_PER_STATEMENT));
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let mut values: Vec<Vec<Value>> = (0..width)
            .map(|_| Vec::with_capacity(ARRAY_ROWS_PER_STATEMENT))
            .collect();
        let mut nulls: Vec<Vec<bool>> = nullable
            .iter()
            .map(|n| {
                if *n {
                    Vec::with_capacity(ARRAY_ROWS_PER_STATEMENT)
                } else {
                    Vec::new()
                }
            })
            .collect();
        for row in rows.by_ref().take(ARRAY_ROWS_PER_STATEMENT) {
            for (c, value) in row.into_iter().enumerate() {
                let null = is_null(&value);
                if nullable[c] {
                    nulls[c].push(null);
                }
                values[c].push(if null { stand_in(&kinds[c].0) } else { value });
            }
        }
        let mut arrays = Vec::with_capacity(width * 2);
        let mut types = Vec::with_capacity(width * 2);
        let mut aliases = Vec::with_capacity(width * 2);
        let mut picks = Vec::with_capacity(width);
        for (c, (column, (kind, sql_type))) in values.into_iter().zip(&kinds).enumerate() {
            arrays.push(Value::Array(kind.clone(), Some(Box::new(column))));
            types.push(*sql_type);
            aliases.push(format!("c{c}"));
            let value = if json.get(c).copied().unwrap_or(false) {
                format!("CAST(u.c{c} AS json)")
            } else {
                format!("u.c{c}")
            };
            if nullable[c] {
                let mask = std::mem::take(&mut nulls[c]);
                arrays.push(Value::from(mask));
                types.push("bool[]");
                aliases.push(format!("n{c}"));
                picks.push(format!("CASE WHEN u.n{c} THEN NULL ELSE {value} END"));
            } else {
                picks.push(value);
            }
        }
        let placeholders: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{t}", i + 1))
            .collect();
        chunks.push(Columnar {
            arrays,
            picks,
            from: format!(
                "UNNEST({}) AS u({})",
                placeholders.join(", "),
                aliases.join(", ")
            ),
        });
    }
    Ok(chunks)
}

/// `INSERT INTO "t" ("a", …) SELECT u.c0, … FROM UNNEST(…) AS u(…)` and `suffix`: the
/// statement of [`insert_values`] for rows bound as arrays. Only the entity's own names are
/// written into it; every value is bound.
fn insert_columnar_sql(table: &str, names: &[String], chunk: &Columnar, suffix: &str) -> String {
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(128);
    let _ = write!(
        sql,
        "INSERT INTO \"{table}\" ({}) SELECT {} FROM {}{suffix}",
        names.join(", "),
        chunk.picks.join(", "),
        chunk.from
    );
    sql
}

/// `UPDATE "t" SET "a" = u.c1, … FROM UNNEST(…) AS u(…) WHERE "t"."key" = u.c0`: the
/// statement of [`update_from_values`] for rows bound as arrays.
fn update_columnar_sql(table: &str, key: &str, columns: &[&str], chunk: &Columnar) -> String {
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(128);
    let _ = write!(sql, "UPDATE \"{table}\" SET ");
    for (i, (column, pick)) in columns.iter().zip(&chunk.picks[1..]).enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(sql, "\"{column}\" = {pick}");
    }
    let _ = write!(
        sql,
        " FROM {} WHERE \"{table}\".\"{key}\" = {}",
        chunk.from, chunk.picks[0]
    );
    sql
}

/// Executes one statement a chunk, its SQL written by `sql` from the chunk; returns the rows
/// changed.
async fn execute_columnar<C: ConnectionTrait>(
    conn: &C,
    chunks: Vec<Columnar>,
    sql: impl Fn(&Columnar) -> String,
) -> Result<u64, DbErr> {
    let mut changed = 0;
    for chunk in chunks {
        let sql = sql(&chunk);
        changed += conn
            .execute_raw(Statement::from_sql_and_values(
                DatabaseBackend::Postgres,
                sql,
                chunk.arrays,
            ))
            .await?
            .rows_affected();
    }
    Ok(changed)
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
    let rows = if backend == DatabaseBackend::Postgres {
        match as_columnar(rows, width, &[]) {
            Ok(chunks) => {
                return execute_columnar(conn, chunks, |chunk| {
                    update_columnar_sql(table, &key, &columns, chunk)
                })
                .await;
            }
            Err(rows) => rows,
        }
    } else {
        rows
    };
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
    fn rows_of_one_kind_a_column_travel_as_arrays_with_their_nulls_told_apart() {
        let rows = vec![
            vec![
                Value::from("a"),
                Value::from(1i64),
                Value::String(None),
                Value::from("{}"),
            ],
            vec![
                Value::from("b"),
                Value::from(2i64),
                Value::from("x"),
                Value::from("[]"),
            ],
        ];
        let chunks = as_columnar(rows, 4, &[false, false, false, true])
            .unwrap_or_else(|_| panic!("rows of one kind a column"));
        assert_eq!(chunks.len(), 1);
        let chunk = &chunks[0];
        // Four columns and one mask, for the column that holds a NULL.
        assert_eq!(chunk.arrays.len(), 5);
        assert_eq!(
            chunk.from,
            "UNNEST($1::text[], $2::int8[], $3::text[], $4::bool[], $5::text[]) AS u(c0, c1, c2, n2, c3)"
        );
        assert_eq!(
            chunk.picks,
            vec![
                "u.c0",
                "u.c1",
                "CASE WHEN u.n2 THEN NULL ELSE u.c2 END",
                "CAST(u.c3 AS json)"
            ]
        );
        let names = vec![
            "\"a\"".to_owned(),
            "\"b\"".to_owned(),
            "\"c\"".to_owned(),
            "\"d\"".to_owned(),
        ];
        assert_eq!(
            insert_columnar_sql("t", &names, chunk, " ON CONFLICT (\"a\") DO NOTHING"),
            "INSERT INTO \"t\" (\"a\", \"b\", \"c\", \"d\") SELECT u.c0, u.c1, CASE WHEN u.n2 THEN NULL ELSE u.c2 END, CAST(u.c3 AS json) FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::bool[], $5::text[]) AS u(c0, c1, c2, n2, c3) ON CONFLICT (\"a\") DO NOTHING"
        );
        assert_eq!(
            update_columnar_sql("t", "a", &["b", "c", "d"], chunk),
            "UPDATE \"t\" SET \"b\" = u.c1, \"c\" = CASE WHEN u.n2 THEN NULL ELSE u.c2 END, \"d\" = CAST(u.c3 AS json) FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::bool[], $5::text[]) AS u(c0, c1, c2, n2, c3) WHERE \"t\".\"a\" = u.c0"
        );
    }

    #[test]
    fn rows_no_array_carries_are_given_back_whole() {
        // A kind no array carries here, and a column whose kinds differ between rows.
        let rows = vec![vec![Value::from(1.5f64)]];
        assert!(as_columnar(rows, 1, &[]).is_err());
        let rows = vec![vec![Value::from("a")], vec![Value::from(1i64)]];
        assert_eq!(as_columnar(rows, 1, &[]).err().map(|r| r.len()), Some(2));
        let rows: Vec<Vec<Value>> = (0..ARRAY_ROWS_PER_STATEMENT + 1)
            .map(|i| vec![Value::from(i as i64)])
            .collect();
        let chunks = as_columnar(rows, 1, &[]).unwrap_or_else(|_| panic!("one kind"));
        assert_eq!(
            chunks.len(),
            2,
            "split past {ARRAY_ROWS_PER_STATEMENT} rows"
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
