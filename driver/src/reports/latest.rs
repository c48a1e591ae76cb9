//! The latest progress of each job of a worker, on its way to the database: the batch of its
//! progress writes (apart from `progress.rs`, which imports the tasks' context that holds
//! this).

use super::{Batch, Coalescer};
use crate::error::Error;
use crate::utils::WorkerUtils;
use formica_sql::reports::WRITE_PROGRESS;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};

/// The latest progress of each job that reported since the last write.
#[derive(Default)]
pub(crate) struct Latest(HashMap<i64, (Option<f64>, Option<String>)>);

impl Latest {
    /// Job `job_id`'s progress is now `checked` (its fraction, and its value as JSON text).
    pub(crate) fn set(&mut self, job_id: i64, checked: (Option<f64>, Option<String>)) {
        self.0.insert(job_id, checked);
    }
}

impl Batch for Latest {
    const WHAT: &'static str = "progress";
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn write(self, utils: WorkerUtils) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async move {
            let (mut ids, mut fractions, mut values) = (Vec::new(), Vec::new(), Vec::new());
            for (id, (fraction, value)) in self.0 {
                ids.push(id);
                fractions.push(fraction);
                values.push(value);
            }
            let sql = formica_sql::render(WRITE_PROGRESS, utils.schema());
            let params: [(&(dyn ToSql + Sync), Type); 3] =
                [(&ids, Type::INT8_ARRAY), (&fractions, Type::FLOAT8_ARRAY), (&values, Type::TEXT_ARRAY)];
            utils.pool().get().await?.query_typed(&sql, &params).await?;
            Ok(())
        })
    }
}

/// A worker's progress on its way to the database.
pub(crate) type ProgressWriter = Coalescer<Latest>;

/// A worker's progress writer, idle until a handler reports, writing at most every `every`.
pub(crate) fn writer(utils: WorkerUtils, every: Duration) -> Arc<ProgressWriter> {
    Coalescer::new(utils, every)
}
