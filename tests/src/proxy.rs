//! A TCP proxy in front of PostgreSQL that a test can make misbehave the way networks and
//! poolers do: stop forwarding on connections while keeping them open (a hung middlebox:
//! the kernel still acknowledges everything, so TCP keepalives see nothing wrong), accept
//! new connections and never answer, cut connections, or cut one after the server ran a
//! statement and before its answer reaches the client.
//!
//! It runs on a thread of its own with its own tokio runtime, so it serves tests on any
//! runtime, and stops when dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FORWARD: u8 = 0;
const FROZEN: u8 = 1;
const CUT: u8 = 2;
/// Forwarding, until the server's next bytes: those are dropped and the connection cut.
const LOSE_ANSWER: u8 = 3;

/// How much of what a client sends is kept, to pick connections by what they said.
const KEEP: usize = 64 * 1024;

struct Conn {
    state: AtomicU8,
    /// The start of what the client sent.
    said: Mutex<Vec<u8>>,
}

struct Shared {
    target: SocketAddr,
    conns: Mutex<Vec<Arc<Conn>>>,
    hang_new: AtomicBool,
    closed: AtomicBool,
    accepted: AtomicUsize,
    /// The next client message that contains this loses its answer.
    lose_answer_to: Mutex<Option<Vec<u8>>>,
    /// Answers lost so far.
    lost: AtomicUsize,
}

/// A proxy to one PostgreSQL server. See the module docs.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on 127.0.0.1 (a free port) to `target`.
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            target,
            conns: Mutex::new(Vec::new()),
            hang_new: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            lose_answer_to: Mutex::new(None),
            lost: AtomicUsize::new(0),
        });
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("formica-test-proxy".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(serve(listener, serving));
            })
            .expect("start the proxy thread");
        Proxy { addr, shared, thread: Some(thread) }
    }

    /// A proxy to the TCP server of the connection string `url`, and `url` rewritten to go
    /// through it.
    pub fn in_front_of(url: &str) -> (Proxy, String) {
        let config: tokio_postgres::Config = url.parse().expect("a valid connection string");
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => panic!("the proxy needs a TCP server, not {url:?}"),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let target = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .expect("resolve the server")
            .next()
            .expect("an address for the server");
        let proxy = Proxy::start(target);
        let url = proxy.url_for(url);
        (proxy, url)
    }

    /// `url` with its host and port replaced by this proxy's.
    pub fn url_for(&self, url: &str) -> String {
        let config: tokio_postgres::Config = url.parse().expect("a valid connection string");
        let mut s = format!("host=127.0.0.1 port={}", self.addr.port());
        if let Some(db) = config.get_dbname() {
            s += &format!(" dbname={db}");
        }
        if let Some(user) = config.get_user() {
            s += &format!(" user={user}");
        }
        if let Some(pw) = config.get_password() {
            s += &format!(" password='{}'", String::from_utf8_lossy(pw).replace('\'', "\\'"));
        }
        s
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections currently open and forwarding.
    pub fn forwarding(&self) -> usize {
        self.conns().iter().filter(|c| c.state.load(Ordering::SeqCst) == FORWARD).count()
    }

    fn conns(&self) -> Vec<Arc<Conn>> {
        self.shared.conns.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stop forwarding on every open connection, keeping it open: both ends wait forever.
    /// Connections made later are forwarded. Returns how many were frozen.
    pub fn freeze_all(&self) -> usize {
        self.set_where(|_| true, FROZEN)
    }

    /// Freeze the open connections on which the client has sent `needle` (for example
    /// `b"LISTEN"`). Returns how many.
    pub fn freeze_where_client_said(&self, needle: &[u8]) -> usize {
        self.set_where(|said| said.windows(needle.len()).any(|w| w == needle), FROZEN)
    }

    /// The next time a client sends bytes that contain `needle` (say, text of a statement
    /// sent unprepared), forward them, then drop the server's answer and cut that connection:
    /// the statement ran (and, on its own, committed) but the client sees only the
    /// connection end.
    pub fn lose_answer_to(&self, needle: &[u8]) {
        *self.shared.lose_answer_to.lock().unwrap_or_else(|e| e.into_inner()) = Some(needle.to_vec());
    }

    /// Answers lost so far ([`Proxy::lose_answer_to`]).
    pub fn lost_answers(&self) -> usize {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Close every open connection (both sides see the connection end).
    pub fn cut_all(&self) -> usize {
        self.set_where(|_| true, CUT)
    }

    /// Accept new connections but never forward them (a server that does not answer), or
    /// go back to forwarding them.
    pub fn hang_new_connections(&self, hang: bool) {
        self.shared.hang_new.store(hang, Ordering::SeqCst);
    }

    fn set_where(&self, pick: impl Fn(&[u8]) -> bool, state: u8) -> usize {
        let mut n = 0;
        for conn in self.conns() {
            let current = conn.state.load(Ordering::SeqCst);
            let said = conn.said.lock().unwrap_or_else(|e| e.into_inner());
            if current != CUT && current != state && pick(&said) {
                conn.state.store(state, Ordering::SeqCst);
                n += 1;
            }
        }
        n
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.cut_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    while !shared.closed.load(Ordering::SeqCst) {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = tokio::time::sleep(Duration::from_millis(20)) => continue,
        };
        let Ok((client, _)) = accepted else { continue };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let hang = shared.hang_new.load(Ordering::SeqCst);
        let conn = Arc::new(Conn {
            state: AtomicU8::new(if hang { FROZEN } else { FORWARD }),
            said: Mutex::default(),
        });
        shared.conns.lock().unwrap_or_else(|e| e.into_inner()).push(conn.clone());
        let shared = shared.clone();
        tokio::spawn(async move {
            let target = shared.target;
            if hang {
                // Accept and say nothing until cut.
                while conn.state.load(Ordering::SeqCst) != CUT {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                drop(client);
                return;
            }
            let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                conn.state.store(CUT, Ordering::SeqCst);
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let up = pump(client_read, server_write, conn.clone(), &shared, true);
            let down = pump(server_read, client_write, conn.clone(), &shared, false);
            tokio::join!(up, down);
            conn.state.store(CUT, Ordering::SeqCst);
        });
    }
}

/// Copy `from` to `to` while the connection forwards; hold what was read while it is
/// frozen; stop when it is cut or either side ends.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    conn: Arc<Conn>,
    shared: &Shared,
    from_client: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match conn.state.load(Ordering::SeqCst) {
            CUT => break,
            FROZEN => {
                // Read nothing more: the sender's buffers fill up as behind a hung peer.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            _ => {}
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            () = tokio::time::sleep(Duration::from_millis(20)) => continue,
        };
        if from_client {
            let mut said = conn.said.lock().unwrap_or_else(|e| e.into_inner());
            let room = KEEP.saturating_sub(said.len());
            said.extend_from_slice(&buf[..n.min(room)]);
            let mut lose = shared.lose_answer_to.lock().unwrap_or_else(|e| e.into_inner());
            if lose.as_ref().is_some_and(|needle| buf[..n].windows(needle.len()).any(|w| w == needle)) {
                *lose = None;
                conn.state.store(LOSE_ANSWER, Ordering::SeqCst);
            }
        } else if conn.state.load(Ordering::SeqCst) == LOSE_ANSWER {
            // The server answers once the statement has committed: let it finish, then cut.
            tokio::time::sleep(Duration::from_millis(200)).await;
            conn.state.store(CUT, Ordering::SeqCst);
            shared.lost.fetch_add(1, Ordering::SeqCst);
            break;
        }
        loop {
            match conn.state.load(Ordering::SeqCst) {
                FROZEN => tokio::time::sleep(Duration::from_millis(10)).await,
                CUT => return,
                _ => break,
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    conn.state.store(CUT, Ordering::SeqCst);
}
