//! The dedicated LISTEN connection: notifications in, up/down facts out.
//!
//! One connection per worker, outside the pool, because a pooled connection's messages are
//! dropped. It reports `ListenerUp` once listening and `ListenerDown` when it ends; the core
//! decides when to connect again (capped backoff) and keeps polling meanwhile.

use crate::db::connect_raw;
use crate::runtime::Runtime;
use formica_core::worker::Input;
use futures::channel::mpsc::UnboundedSender;
use futures::StreamExt;
use std::sync::Arc;
use tokio_postgres::{AsyncMessage, Config};

/// The channels a worker listens on.
pub const CHANNELS: [&str; 2] = ["jobs:insert", "worker:migrate"];

/// Connect, LISTEN, and forward what arrives until the connection ends.
pub(crate) async fn listen(runtime: Arc<dyn Runtime>, config: Config, inputs: UnboundedSender<Input>) {
    let error = match run(runtime.as_ref(), &config, &inputs).await {
        Ok(()) => "the connection closed".to_owned(),
        Err(e) => e.to_string(),
    };
    let _ = inputs.unbounded_send(Input::ListenerDown { error });
}

async fn run(
    runtime: &dyn Runtime,
    config: &Config,
    inputs: &UnboundedSender<Input>,
) -> Result<(), crate::Error> {
    let (client, mut connection) = connect_raw(runtime, config).await?;
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
        let sql: String = CHANNELS.iter().map(|c| format!("LISTEN \"{c}\";")).collect();
        client.batch_execute(&sql).await?;
        let _ = inputs.unbounded_send(Input::ListenerUp);
        while let Some(message) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
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
