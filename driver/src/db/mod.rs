//! Connections: opening one through the [`Runtime`](crate::runtime::Runtime), and a small pool of them.
//!
//! Every connection is made with `Config::connect_raw` over a socket the runtime opened,
//! so tokio-postgres never needs a tokio runtime and one client type serves every
//! adapter. TLS runs over that socket too (see [`crate::tls`]); the settings, environment
//! and password file are read by [`crate::settings`].
//!
//! Two limits keep a broken network from leaving a worker silently idle:
//!
//! - opening a connection gives up after `connect_timeout` (from the connection settings,
//!   else [`DEFAULT_CONNECT_TIMEOUT`]), so a server that accepts and never answers is an
//!   error, not a hang;
//! - the connections of a [`Pool`] and the worker's LISTEN connection are *watched*: one
//!   that owes a response (a statement was sent, its `ReadyForQuery` has not come) and has
//!   received nothing for the response timeout is closed, so the statement fails with an
//!   error the worker retries on a fresh connection. TCP keepalives cannot do this: a
//!   proxy or a pooler that hangs still acknowledges TCP. The timeout is `tcp_user_timeout`
//!   of the connection settings (tokio-postgres reads it in seconds; `0` turns the watch
//!   off), else [`DEFAULT_RESPONSE_TIMEOUT`]; [`Pool::response_timeout`] sets it in
//!   code. A statement that legitimately runs longer than this without sending a row (a
//!   long report inside a task, through the worker's pool) needs a longer timeout. The
//!   watch itself is in the `watch` module; over TLS it watches inside the encryption. When
//!   a pooled connection ends with an error (the watch gave up on it, say), whatever it was
//!   running is also cancelled on the server (a cancel request on a new connection to the
//!   same address): a backend waiting on a lock does not notice its client is gone, and
//!   would otherwise go on waiting, holding its connection slot.
//!
//! Statements the worker prepares are cached per connection, and sent unnamed once the pool
//! finds its server sessions shared by a connection pooler (see the `named` module).

mod connect;
mod named;
mod pool;

pub use self::connect::{
    connect, connect_raw, connect_raw_watched, connect_watched, response_timeout, RawConnection,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
};
pub(crate) use self::named::refused_by_pooler;
pub use self::pool::{Pool, PoolStatus, PooledClient, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_IDLE_TIMEOUT};
