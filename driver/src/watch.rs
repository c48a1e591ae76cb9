//! The response watch (see [`crate::db`]): a stream wrapper that fails its reads once the
//! connection has owed a response for the timeout with nothing received (and nothing sent)
//! meanwhile.
//!
//! It follows the protocol's message framing in both directions: each request that ends in
//! `ReadyForQuery` (the startup message, `Query`, `Sync`, `FunctionCall`) is owed until that
//! `ReadyForQuery` arrives; an `SSLRequest` is owed until its one-byte answer. An idle connection (a LISTEN connection between notifications)
//! owes nothing and is never timed out.
//!
//! Framing needs the plain protocol, so with TLS the watch sits on the decrypted stream:
//! on the raw socket it follows the `SSLRequest` and its one-byte answer, and steps aside
//! when the server answers `S` (what follows is TLS records); the TLS connector then watches
//! the stream inside TLS ([`crate::tls`]).

use crate::runtime::Runtime;
use futures::future::BoxFuture;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a watch needs: the runtime's timer and the response timeout.
pub(crate) type Watch = Option<(Arc<dyn Runtime>, Duration)>;

/// `inner`, watched (or passed through untouched when `watch` is `None`).
pub(crate) struct Watched<S> {
    inner: S,
    watch: Watch,
    sent: Framing,
    received: Framing,
    /// An `SSLRequest` was sent; its one-byte answer is next.
    negotiating: bool,
    /// Requests whose `ReadyForQuery` has not arrived.
    owed: u64,
    /// The last byte sent or received, by the watch's runtime's clock (`None`: unwatched).
    last_activity: Option<Instant>,
    /// A wake-up at the given instant, polled with the connection's waker.
    alarm: Option<(Instant, BoxFuture<'static, ()>)>,
    expired: bool,
}

/// What [`Framing::feed`] reports at the start of each message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Message {
    /// The untagged startup message.
    Startup,
    /// An untagged `SSLRequest` (8 bytes): another untagged message follows.
    SslRequest,
    /// A tagged message.
    Tagged(u8),
}

/// Follows message boundaries in one direction of the protocol.
struct Framing {
    /// The next message is untagged (startup phase).
    startup: bool,
    header: [u8; 5],
    filled: usize,
    /// Body bytes of the current message still to pass.
    skip: usize,
}

impl Framing {
    fn new(startup: bool) -> Self {
        Framing { startup, header: [0; 5], filled: 0, skip: 0 }
    }

    /// Pass `data`, calling `on_message` for each message that begins in it.
    fn feed(&mut self, mut data: &[u8], mut on_message: impl FnMut(Message)) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            let header_len = if self.startup { 4 } else { 5 };
            let n = (header_len - self.filled).min(data.len());
            self.header[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            data = &data[n..];
            if self.filled == header_len {
                let (message, len) = if self.startup {
                    let len =
                        u32::from_be_bytes([self.header[0], self.header[1], self.header[2], self.header[3]]);
                    // A startup message is longer: it names at least the user.
                    (if len == 8 { Message::SslRequest } else { Message::Startup }, len)
                } else {
                    let len =
                        u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]);
                    (Message::Tagged(self.header[0]), len)
                };
                self.skip = (len as usize).saturating_sub(4);
                self.filled = 0;
                self.startup = message == Message::SslRequest;
                on_message(message);
            }
        }
    }
}

impl<S> Watched<S> {
    /// Watch `inner` from its first byte (the startup phase).
    pub(crate) fn new(inner: S, watch: Watch) -> Self {
        let mut watched = Watched {
            inner,
            watch,
            sent: Framing::new(true),
            received: Framing::new(false),
            negotiating: false,
            owed: 0,
            last_activity: None,
            alarm: None,
            expired: false,
        };
        watched.touch();
        watched
    }

    /// A byte went one way or the other: the connection is alive now.
    fn touch(&mut self) {
        self.last_activity = self.watch.as_ref().map(|(runtime, _)| runtime.monotonic());
    }

    /// `Ready` with the error once the connection has owed a response for too long;
    /// otherwise make sure `cx` is woken when that could happen.
    fn check(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let (Some((runtime, timeout)), Some(last_activity)) = (&self.watch, self.last_activity) else {
            return Poll::Pending;
        };
        let timeout = *timeout;
        loop {
            if self.owed == 0 && !self.expired {
                self.alarm = None;
                return Poll::Pending;
            }
            let deadline = last_activity + timeout;
            if self.expired || runtime.monotonic() >= deadline {
                self.expired = true;
                self.alarm = None;
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no response from PostgreSQL for {timeout:?} (the response timeout, tcp_user_timeout): \
                         the connection is taken as dead"
                    ),
                ));
            }
            // Activity only moves the deadline later: an alarm set for an earlier one rings
            // early, and is set again here.
            let alarm = match &mut self.alarm {
                Some((at, alarm)) if *at <= deadline => alarm,
                _ => &mut self.alarm.insert((deadline, runtime.sleep_until(deadline))).1,
            };
            match alarm.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => self.alarm = None,
            }
        }
    }

    fn received(&mut self, mut data: &[u8]) {
        if self.negotiating {
            // The answer to the `SSLRequest`, owed like any other.
            self.negotiating = false;
            self.owed = self.owed.saturating_sub(1);
            if data.first() == Some(&b'S') {
                // TLS records follow: the watch moves inside TLS.
                self.watch = None;
                self.owed = 0;
                self.alarm = None;
                return;
            }
            if data.first() == Some(&b'N') {
                data = &data[1..];
            }
        }
        let owed = &mut self.owed;
        self.received.feed(data, |message| {
            if message == Message::Tagged(b'Z') {
                *owed = owed.saturating_sub(1);
            }
        });
    }

    fn sent(&mut self, data: &[u8]) {
        let (owed, negotiating) = (&mut self.owed, &mut self.negotiating);
        self.sent.feed(data, |message| match message {
            Message::SslRequest => {
                *negotiating = true;
                *owed += 1;
            }
            Message::Startup | Message::Tagged(b'Q' | b'S' | b'F') => *owed += 1,
            Message::Tagged(_) => {}
        });
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the connection timed out")));
        }
        if this.watch.is_none() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let data = &buf.filled()[before..];
                if !data.is_empty() {
                    this.touch();
                    this.received(data);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.check(cx).map(Err),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if this.watch.is_some() {
            if let Poll::Ready(Ok(n)) = &result {
                if *n > 0 {
                    this.touch();
                    this.sent(&buf[..*n]);
                    // The connection may wait on this write's waker alone: arm the alarm.
                    let _ = this.check(cx);
                }
            }
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
