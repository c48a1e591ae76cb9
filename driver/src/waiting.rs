//! Waiting for notifications that name a job, on a connection of its own (a pooled one's
//! notifications are dropped): what [`WorkerUtils::wait_for_job`] and
//! [`WorkerUtils::wait_for_progress`] share.

use crate::db::connect_raw_watched;
use crate::error::Error;
use crate::utils::WorkerUtils;
use futures::channel::mpsc::{self, UnboundedReceiver};
use futures::future::{self, BoxFuture, Either};
use futures::StreamExt;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Client};

/// A connection LISTENing on one channel, and the deadline of the wait.
pub(crate) struct Waiting {
    pub(crate) client: Client,
    messages: UnboundedReceiver<Result<AsyncMessage, Error>>,
    deadline: BoxFuture<'static, ()>,
}

impl Waiting {
    /// Connect, LISTEN on `channel`, and start the `timeout`. The connection is driven by a
    /// task on the pool's runtime, which ends when the client is dropped.
    pub(crate) async fn listen(utils: &WorkerUtils, channel: &str, timeout: Duration) -> Result<Self, Error> {
        let runtime = utils.pool().runtime().clone();
        let (client, mut connection) = connect_raw_watched(runtime.clone(), utils.pool().settings()).await?;
        let (sender, messages) = mpsc::unbounded();
        runtime.spawn(Box::pin(async move {
            let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = stream.next().await {
                if sender.unbounded_send(message.map_err(Error::from)).is_err() {
                    break;
                }
            }
        }));
        client.batch_execute(&format!("LISTEN \"{channel}\"")).await?;
        Ok(Waiting { client, messages, deadline: runtime.sleep(timeout) })
    }

    /// Until a notification names job `id` (`true`), or the deadline passes (`false`).
    pub(crate) async fn named(&mut self, id: i64) -> Result<bool, Error> {
        let id = id.to_string();
        loop {
            match future::select(self.messages.next(), &mut self.deadline).await {
                Either::Left((Some(Ok(AsyncMessage::Notification(n))), _))
                    if n.payload().split(',').any(|job| job == id) =>
                {
                    return Ok(true)
                }
                Either::Left((Some(Ok(_)), _)) => continue,
                Either::Left((Some(Err(e)), _)) => return Err(e),
                Either::Left((None, _)) => {
                    return Err(Error::Internal("the waiting connection closed".into()))
                }
                Either::Right(_) => return Ok(false),
            }
        }
    }
}
