//! Where a worker's parts run, and how they are stopped.

use crate::error::Error;
use crate::runtime::Runtime;
use futures::future::{AbortHandle, Abortable, FutureExt};
use std::future::Future;
use std::sync::Arc;

/// Spawn `task` on `runtime`, stopped by the returned handle.
pub(super) fn spawn_abortable(
    runtime: &dyn Runtime,
    task: impl Future<Output = ()> + Send + 'static,
) -> AbortHandle {
    let (handle, registration) = AbortHandle::new_pair();
    runtime.spawn(Box::pin(Abortable::new(task, registration).map(|_| ())));
    handle
}

/// Stops what it holds when dropped.
pub(super) struct Stop(pub(super) AbortHandle);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a worker's parts run (see [`Runtime::dedicated`]).
pub(super) struct Threads {
    /// The application's runtime: tasks run there, and the clocks are read from it.
    pub(super) tasks: Arc<dyn Runtime>,
    /// The loop, its connections and its LISTEN stream.
    pub(super) io: Arc<dyn Runtime>,
    /// The lease's keeper.
    pub(super) lease: Arc<dyn Runtime>,
}

impl Threads {
    pub(super) fn of(runtime: Arc<dyn Runtime>) -> Result<Self, Error> {
        let dedicated = |name| match runtime.dedicated(name) {
            Some(Ok(thread)) => Ok(thread),
            Some(Err(e)) => Err(Error::Internal(format!("could not start the {name} thread: {e}"))),
            None => Ok(runtime.clone()),
        };
        Ok(Threads {
            io: dedicated("formica-io")?,
            lease: dedicated("formica-lease")?,
            tasks: runtime.clone(),
        })
    }
}
