//! Add layers: each job [`WorkerUtils`](crate::WorkerUtils) adds passes through them, in
//! order, before it is stored. A file of their own: the utilities need them, and the run
//! layers need the task's context, which holds the utilities.

use crate::error::Error;
use formica_core::job::RawJob;
use std::borrow::Cow;
use std::sync::Arc;

/// An add layer: fill or check the job's fields, or refuse it with a reason.
type AddLayer = Arc<dyn Fn(&mut RawJob) -> Result<(), String> + Send + Sync>;

/// The add layers of a [`WorkerUtils`](crate::WorkerUtils), in order; `None` without any,
/// so cloning the utilities (once per job run) costs nothing more than without middleware.
#[derive(Clone, Default)]
pub(crate) struct AddLayers(Option<Arc<[AddLayer]>>);

impl AddLayers {
    /// These layers, then `layer`.
    pub(crate) fn with<F>(&self, layer: F) -> Self
    where
        F: Fn(&mut RawJob) -> Result<(), String> + Send + Sync + 'static,
    {
        let layer: AddLayer = Arc::new(layer);
        AddLayers(Some(self.layers().iter().cloned().chain([layer]).collect()))
    }

    fn layers(&self) -> &[AddLayer] {
        self.0.as_deref().unwrap_or_default()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// `job` as the layers leave it, or the first refusal.
    pub(crate) fn apply(&self, mut job: RawJob) -> Result<RawJob, Error> {
        for layer in self.layers() {
            layer(&mut job).map_err(|reason| Error::Refused { task: job.identifier.clone(), reason })?;
        }
        Ok(job)
    }

    /// `jobs` as the layers leave them (as they are, without layers), or the first refusal.
    pub(crate) fn apply_all<'a>(&self, jobs: &'a [RawJob]) -> Result<Cow<'a, [RawJob]>, Error> {
        if self.is_empty() {
            return Ok(Cow::Borrowed(jobs));
        }
        jobs.iter().map(|job| self.apply(job.clone())).collect::<Result<Vec<_>, _>>().map(Cow::Owned)
    }
}
