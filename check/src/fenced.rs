//! What a worker's write answers when it no longer holds some of its jobs: the model's
//! side of `QueryResult::Fenced`.

use crate::model::Model;
use formica_core::worker::{Fenced, QueryResult};

impl Model {
    /// The answer of a write of `ids` by `worker_id`: `Done`, or `Fenced` with the jobs it
    /// does not hold (sorted, once each) and who does.
    pub(crate) fn not_held(&self, ids: impl Iterator<Item = i64>, worker_id: &str) -> QueryResult {
        let mut fenced: Vec<Fenced> = ids
            .filter_map(|id| {
                let holder = self.rows.get(&id).and_then(|r| r.locked_by.clone());
                (holder.as_deref() != Some(worker_id)).then_some(Fenced { job_id: id, holder })
            })
            .collect();
        fenced.sort_by_key(|f| f.job_id);
        fenced.dedup_by_key(|f| f.job_id);
        if fenced.is_empty() {
            QueryResult::Done
        } else {
            QueryResult::Fenced(fenced)
        }
    }
}
