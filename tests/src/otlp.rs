//! An OTLP/HTTP collector for tests: a plain HTTP server that keeps the spans posted to
//! `/v1/traces` (protobuf, uncompressed), read with a reader of the few fields tests look at.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// A span as exported: the fields tests compare (ids as raw bytes; a root span's parent is
/// empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    /// The attributes whose value is a string, in the order sent.
    pub attributes: Vec<(String, String)>,
}

/// A collector listening on a free local port.
pub struct Collector {
    listener: TcpListener,
}

impl Collector {
    pub fn start() -> Collector {
        Collector { listener: TcpListener::bind("127.0.0.1:0").expect("bind the collector") }
    }

    /// The endpoint to give an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.listener.local_addr().expect("its address"))
    }

    /// Receive on a thread until `enough` holds for the spans received, or for `within`;
    /// answers every span received.
    pub fn spawn(
        self,
        within: Duration,
        enough: impl Fn(&[Span]) -> bool + Send + 'static,
    ) -> std::thread::JoinHandle<Vec<Span>> {
        std::thread::spawn(move || {
            let mut spans = Vec::new();
            self.listener.set_nonblocking(true).expect("non-blocking");
            let deadline = Instant::now() + within;
            while Instant::now() < deadline && !enough(&spans) {
                match self.listener.accept() {
                    Ok((stream, _)) => spans.extend(receive(stream)),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            spans
        })
    }
}

/// One request's spans, answered with 200.
fn receive(mut stream: std::net::TcpStream) -> Vec<Span> {
    stream.set_nonblocking(false).expect("blocking");
    let (mut request, mut buf) = (Vec::new(), [0u8; 4096]);
    let body_start = loop {
        let n = stream.read(&mut buf).expect("read the request");
        assert!(n > 0, "the request ended early");
        request.extend_from_slice(&buf[..n]);
        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..body_start]).to_lowercase();
    assert!(head.starts_with("post /v1/traces"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().expect("a length"));
    while request.len() < body_start + length {
        let n = stream.read(&mut buf).expect("read the body");
        assert!(n > 0, "the body ended early");
        request.extend_from_slice(&buf[..n]);
    }
    stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").expect("answer");
    spans(&request[body_start..])
}

/// The spans of an `ExportTraceServiceRequest`: resource_spans (1) > scope_spans (2) >
/// spans (2) > trace_id (1), span_id (2), parent_span_id (4), name (5), attributes (9) >
/// key (1), value (2) > string_value (1).
pub fn spans(body: &[u8]) -> Vec<Span> {
    let mut spans = Vec::new();
    for resource in nested(body, 1) {
        for scope in nested(resource, 2) {
            for span in nested(scope, 2) {
                let field = |number| nested(span, number).into_iter().next().unwrap_or_default().to_vec();
                spans.push(Span {
                    name: String::from_utf8(field(5)).expect("a UTF-8 name"),
                    trace_id: field(1),
                    span_id: field(2),
                    parent_span_id: field(4),
                    attributes: nested(span, 9).into_iter().filter_map(string_attribute).collect(),
                });
            }
        }
    }
    spans
}

/// A `KeyValue` whose value is a string.
fn string_attribute(key_value: &[u8]) -> Option<(String, String)> {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).expect("UTF-8");
    let key = text(nested(key_value, 1).first()?);
    let value = text(nested(nested(key_value, 2).first()?, 1).first()?);
    Some((key, value))
}

/// The values of the length-delimited fields `number` of the message `message`.
fn nested(mut message: &[u8], number: u64) -> Vec<&[u8]> {
    let mut found = Vec::new();
    while !message.is_empty() {
        let key = varint(&mut message);
        let len = match key & 7 {
            0 => {
                varint(&mut message);
                0
            }
            1 => 8,
            2 => usize::try_from(varint(&mut message)).expect("a length"),
            5 => 4,
            other => panic!("wire type {other}"),
        };
        let (value, rest) = message.split_at(len);
        if key & 7 == 2 && key >> 3 == number {
            found.push(value);
        }
        message = rest;
    }
    found
}

fn varint(bytes: &mut &[u8]) -> u64 {
    let mut value = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().expect("a complete varint");
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    value
}
