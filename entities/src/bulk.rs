//! Multi-row statements: inserts of many rows split so that no statement binds more
//! parameters than SQLite or PostgreSQL accept.

use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DbErr, EntityTrait, Iterable, sea_query::OnConflict,
};

/// Bind parameters per statement: under SQLite's 32,766 and PostgreSQL's 65,535.
const MAX_PARAMETERS: usize = 30_000;

/// Rows of entity `E` per multi-row statement.
pub fn rows_per_statement<E: EntityTrait>() -> usize {
    (MAX_PARAMETERS / E::Column::iter().count().max(1)).max(1)
}

/// Inserts `rows` in as few statements as the parameter limit allows; with `on_conflict`,
/// each statement carries that clause (an upsert). Returns the rows written.
pub async fn insert_chunked<A, C>(
    conn: &C,
    rows: impl IntoIterator<Item = A>,
    on_conflict: Option<&OnConflict>,
) -> Result<u64, DbErr>
where
    A: ActiveModelTrait,
    C: ConnectionTrait,
{
    let per_statement = rows_per_statement::<A::Entity>();
    let mut rows = rows.into_iter().peekable();
    let mut written = 0;
    while rows.peek().is_some() {
        let chunk: Vec<A> = rows.by_ref().take(per_statement).collect();
        let mut insert = <A::Entity as EntityTrait>::insert_many(chunk);
        if let Some(clause) = on_conflict {
            insert = insert.on_conflict(clause.clone());
        }
        written += insert.exec_without_returning(conn).await?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_stay_under_the_parameter_limit() {
        let rows = rows_per_statement::<crate::payout::Entity>();
        let columns = <crate::payout::Entity as EntityTrait>::Column::iter().count();
        assert!(rows * columns <= MAX_PARAMETERS);
        assert!(rows >= 500, "{rows} rows per statement");
    }
}
