//! Connections: opening one through the [`Runtime`](crate::runtime::Runtime), and a small pool of them.
//!
//! Every connection is made with `Config::connect_raw` over a socket the runtime opened,
//! so tokio-postgres never needs a tokio runtime and one client type serves every
//! adapter. TLS runs over that socket too (see [`crate::tls`]); the settings, environment
//! and password file are read by [`crate::settings`].
//!
//! The limits on opening and on waiting for an answer are told on [`Pool`].
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
