//! What `add_jobs` stores for a job and answers: the plain insert's jobs rebuilt from what
//! was sent, and the names of the tasks and queues in the keyed insert's rows.

use crate::error::Error;
use crate::rows::{job_from_parts, ResultRow};
use formica_core::job::{Job, JobSpec, RawJob, DEFAULT_MAX_ATTEMPTS};
use serde_json::Value;
use std::collections::BTreeMap;

/// Flags as the jobs table stores them: an object whose keys are the flags (none: null).
pub(super) fn stored_flags(spec: &JobSpec) -> Option<Value> {
    let flags = spec.flags.as_ref().filter(|flags| !flags.is_empty())?;
    Some(Value::Object(flags.iter().map(|flag| (flag.clone(), Value::Bool(true))).collect()))
}

/// What a job without key or queue is stored with, its columns' defaults filled in (as
/// `add_jobs` fills them).
pub(super) struct Stored {
    pub(super) payload: Value,
    pub(super) max_attempts: i16,
    pub(super) priority: i16,
}

impl Stored {
    pub(super) fn of(job: &RawJob) -> Stored {
        Stored {
            payload: if job.payload.is_null() {
                Value::Object(Default::default())
            } else {
                job.payload.clone()
            },
            max_attempts: job.spec.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            priority: job.spec.priority.unwrap_or(0),
        }
    }
}

/// The jobs the plain insert stored: it answers with what the database chose (id and
/// times), in the order given; the rest is what was sent.
pub(super) fn plain_jobs(jobs: &[RawJob], rows: &[impl ResultRow]) -> Result<Vec<Job>, Error> {
    if rows.len() != jobs.len() {
        return Err(Error::Row(format!("{} jobs added, {} rows back", jobs.len(), rows.len())));
    }
    jobs.iter()
        .zip(rows)
        .map(|(job, row)| {
            let Stored { payload, max_attempts, priority } = Stored::of(job);
            Ok(Job {
                id: row.read(0)?,
                job_queue_id: None,
                queue_name: None,
                task_identifier: job.identifier.clone(),
                payload: payload.into(),
                priority,
                run_at: row.read(1)?,
                attempts: 0,
                max_attempts,
                last_error: None,
                created_at: row.read(2)?,
                updated_at: row.read(3)?,
                key: None,
                locked_at: None,
                locked_by: None,
                revision: 0,
                flags: job.spec.flags.iter().flatten().cloned().collect(),
            })
        })
        .collect()
}

/// The task and queue names of `add_jobs`' rows. Those the statement created are null in
/// its rows (its joins read the snapshot taken before it ran) and are looked up after.
#[derive(Default)]
pub(super) struct Names {
    tasks: BTreeMap<i32, String>,
    queues: BTreeMap<i32, String>,
    pub(super) missing_tasks: Vec<i32>,
    pub(super) missing_queues: Vec<i32>,
}

impl Names {
    pub(super) fn of(rows: &[impl ResultRow]) -> Result<Names, Error> {
        let mut names = Names::default();
        for row in rows {
            let task_id: i32 = row.read(row.column("task_id")?)?;
            match row.read::<Option<String>>(row.column("task_identifier")?)? {
                Some(name) => {
                    names.tasks.insert(task_id, name);
                }
                None => names.missing_tasks.push(task_id),
            }
            if let Some(queue_id) = row.read::<Option<i32>>(row.column("job_queue_id")?)? {
                match row.read::<Option<String>>(row.column("queue_name")?)? {
                    Some(name) => {
                        names.queues.insert(queue_id, name);
                    }
                    None => names.missing_queues.push(queue_id),
                }
            }
        }
        let Names { tasks, queues, missing_tasks, missing_queues } = &mut names;
        missing_tasks.retain(|id| !tasks.contains_key(id));
        missing_queues.retain(|id| !queues.contains_key(id));
        missing_tasks.sort_unstable();
        missing_tasks.dedup();
        missing_queues.sort_unstable();
        missing_queues.dedup();
        Ok(names)
    }

    /// A row of the NAMES statement: ('task' | 'queue', id, name).
    pub(super) fn learn(&mut self, row: &impl ResultRow) -> Result<(), Error> {
        let (kind, id, name): (String, i32, String) = (row.read(0)?, row.read(1)?, row.read(2)?);
        if kind == "task" { &mut self.tasks } else { &mut self.queues }.insert(id, name);
        Ok(())
    }

    pub(super) fn job(&self, row: &impl ResultRow) -> Result<Job, Error> {
        let task_id: i32 = row.read(row.column("task_id")?)?;
        let queue_id: Option<i32> = row.read(row.column("job_queue_id")?)?;
        let task = self
            .tasks
            .get(&task_id)
            .cloned()
            .ok_or_else(|| Error::Row(format!("no task with id {task_id}")))?;
        job_from_parts(row, task, queue_id.and_then(|q| self.queues.get(&q).cloned()))
    }
}
