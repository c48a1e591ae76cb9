//! How the read model reads: one read-only statement on a pooled connection, and a column
//! of its rows by name.

use crate::rows::ResultRow;
use crate::utils::WorkerUtils;
use crate::Error;
use formica_sql as sql;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::Row;

/// The column `name` of `row`; an error names the column.
pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, name: &str) -> Result<T, Error> {
    row.read(row.column(name)?)
}

/// Run the read-only statement `template` (rendered for the schema)
/// with `params` and their types.
pub(crate) async fn read(
    utils: &WorkerUtils,
    template: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, Error> {
    let text = sql::render(template, utils.schema());
    let client = utils.pool().get().await?;
    Ok(client.query_typed(&text, params).await?)
}
