//! The dashboard (`formica-ui`) served on a free loopback port for a test, and a plain
//! HTTP/1.1 client that sends exactly the headers a test gives (Host and Origin too).

use formica::WorkerUtils;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A dashboard running until dropped.
pub struct Dashboard {
    /// Its address, `127.0.0.1:port`.
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Dashboard {
    /// Serve `utils` with `options` (needs a tokio runtime).
    pub async fn start(utils: WorkerUtils, options: formica_ui::Options) -> Dashboard {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a free port");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            formica_ui::serve(listener, utils, options, async {
                let _ = stopped.await;
            })
            .await
            .expect("the dashboard serves");
        });
        Dashboard { addr, stop: Some(stop) }
    }

    /// The address of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], None).await
    }

    /// `POST path` with a JSON `body`, as the dashboard's own script sends it.
    pub async fn action(&self, path: &str, body: Value) -> Reply {
        self.request("POST", path, &[("x-formica-ui", "1")], Some(body)).await
    }

    /// Any request, with `headers` added to `Host` (unless given) and `Connection: close`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.expect("connect to the dashboard");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
            head += &format!("Host: {}\r\n", self.addr);
        }
        for (name, value) in headers {
            head += &format!("{name}: {value}\r\n");
        }
        if method != "GET" {
            head += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len());
        }
        head += "\r\n";
        stream.write_all(head.as_bytes()).await.expect("send");
        stream.write_all(body.as_bytes()).await.expect("send");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read the answer");
        Reply::parse(&raw)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// Its status code.
    pub status: u16,
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8_lossy(raw);
        let (head, rest) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let mut lines = head.lines();
        let status =
            lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked { dechunk(rest) } else { rest.to_owned() };
        Reply { status, headers, body }
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    body
}
