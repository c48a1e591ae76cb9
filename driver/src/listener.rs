//! The dedicated LISTEN connection: notifications in, up/down facts out.
//!
//! One connection per worker, outside the pool, because a pooled connection's messages are
//! dropped. It reports `ListenerUp` once listening and `ListenerDown` when it ends; the core
//! decides when to connect again (capped backoff) and keeps polling meanwhile.
//!
//! A LISTEN connection is idle most of the time, so a connection that died silently (a
//! proxy or a network that stopped forwarding without closing) would never be noticed by
//! waiting for notifications. The listener therefore sends a trivial statement every
//! [`PING_INTERVAL`] (or every response timeout, if shorter): on a dead connection it gets
//! no answer within the response timeout, and the listener reports `ListenerDown`.

use crate::db::{connect_raw_watched, response_timeout};
use crate::runtime::Runtime;
use crate::settings::ConnectionSettings;
use formica_core::protocol::{Input, CHANNELS};
use futures::channel::mpsc::UnboundedSender;
use futures::future::{self, Either};
use futures::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Client};

/// The longest time between two checks that the LISTEN connection still answers.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);

/// Where a heartbeat that made a lease tells the listening workers (`heartbeat.sql`): the
/// payload is the worker that started. Heard by the driver, not the core: it only tells the
/// fetches to take turns (`Executor::others_alive`).
const WORKERS: &str = "formica:workers";

/// Another Formica worker started: who this worker is, and the flag that makes its fetches
/// take turns (the lease's keeper sets it with each heartbeat's answer).
pub(crate) struct Starts {
    pub worker_id: Arc<str>,
    pub others_alive: Arc<AtomicBool>,
}

/// Connect, LISTEN, and forward what arrives until the connection ends.
pub(crate) async fn listen(
    runtime: Arc<dyn Runtime>,
    settings: ConnectionSettings,
    inputs: UnboundedSender<Input>,
    starts: Starts,
) {
    let error = match run(&runtime, &settings, &inputs, &starts).await {
        Ok(()) => "the connection closed".to_owned(),
        Err(e) => e.to_string(),
    };
    let _ = inputs.unbounded_send(Input::ListenerDown { error });
}

async fn run(
    runtime: &Arc<dyn Runtime>,
    settings: &ConnectionSettings,
    inputs: &UnboundedSender<Input>,
    starts: &Starts,
) -> Result<(), crate::Error> {
    let (client, mut connection) = connect_raw_watched(runtime.clone(), settings).await?;
    // Without a watch the ping still gets an answer within this, or the connection is
    // taken as dead.
    let ping_timeout = response_timeout(settings.config()).unwrap_or(PING_INTERVAL);
    let ping_every = ping_timeout.min(PING_INTERVAL);
    let (messages_tx, mut messages) = futures::channel::mpsc::unbounded();
    // The connection is polled here, in this task: it delivers notifications and drives the
    // LISTEN statement itself.
    let drive = async move {
        let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = stream.next().await {
            match message {
                Ok(message) => {
                    let _ = messages_tx.unbounded_send(message);
                }
                Err(e) => return Err(crate::Error::from(e)),
            }
        }
        Ok(())
    };
    let listen = async {
        let sql: String = CHANNELS.iter().chain([&WORKERS]).map(|c| format!("LISTEN \"{c}\";")).collect();
        client.batch_execute(&sql).await?;
        let _ = inputs.unbounded_send(Input::ListenerUp);
        let mut tick = runtime.sleep(ping_every);
        loop {
            let message = match future::select(messages.next(), &mut tick).await {
                Either::Left((Some(message), _)) => message,
                Either::Left((None, _)) => break,
                Either::Right(((), _)) => {
                    ping(runtime.as_ref(), &client, ping_timeout).await?;
                    tick = runtime.sleep(ping_every);
                    continue;
                }
            };
            if let AsyncMessage::Notification(n) = message {
                if n.channel() == WORKERS {
                    if n.payload() != &*starts.worker_id {
                        starts.others_alive.store(true, Ordering::Relaxed);
                    }
                    continue;
                }
                tracing::trace!(target: "formica::latency", channel = n.channel(), "notification received");
                let _ = inputs.unbounded_send(Input::Notification {
                    channel: n.channel().to_owned(),
                    payload: n.payload().to_owned(),
                });
            }
        }
        Ok::<(), crate::Error>(())
    };
    futures::pin_mut!(drive, listen);
    match futures::future::select(drive, listen).await {
        futures::future::Either::Left((result, _)) | futures::future::Either::Right((result, _)) => result,
    }
}

/// A round trip on the LISTEN connection, answered within `timeout`.
async fn ping(runtime: &dyn Runtime, client: &Client, timeout: Duration) -> Result<(), crate::Error> {
    let statement = client.simple_query("");
    futures::pin_mut!(statement);
    match future::select(statement, runtime.sleep(timeout)).await {
        Either::Left((result, _)) => result.map(drop).map_err(crate::Error::from),
        Either::Right(((), _)) => Err(crate::Error::TimedOut(format!(
            "the LISTEN connection did not answer a ping within {timeout:?}: taken as dead"
        ))),
    }
}
