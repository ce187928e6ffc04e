//! The admin HTTP API: `GET /status` (JSON), `GET /metrics` (Prometheus text), `GET /healthz`,
//! and `GET /` (the status page: a live map of regions coloured by site). Plain HTTP/1.1, one
//! request per connection, read-only; bind it to an operator network.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// Largest request head read.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// A client slower than this is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Admin connections served at once.
const MAX_CONNECTIONS: usize = 64;

/// What the admin API asks the core's loop.
#[derive(Debug)]
pub(crate) enum AdminQuery {
    Status(oneshot::Sender<serde_json::Value>),
    Metrics(oneshot::Sender<String>),
}

pub(crate) async fn serve(
    listener: TcpListener,
    queries: mpsc::Sender<AdminQuery>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
        let queries = queries.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(IO_TIMEOUT, handle(stream, queries)).await;
            drop(permit);
        });
    }
}

async fn handle(mut stream: TcpStream, queries: mpsc::Sender<AdminQuery>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_REQUEST_BYTES {
            return respond(&mut stream, 431, "text/plain", b"request head too large\n").await;
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut stream, 405, "text/plain", b"only GET\n").await;
    }
    match path.split('?').next().unwrap_or("") {
        "/healthz" => {
            let (tx, rx) = oneshot::channel();
            let alive = queries.send(AdminQuery::Status(tx)).await.is_ok() && rx.await.is_ok();
            if alive {
                respond(&mut stream, 200, "text/plain", b"ok\n").await
            } else {
                respond(&mut stream, 503, "text/plain", b"core loop not answering\n").await
            }
        }
        "/status" => {
            let (tx, rx) = oneshot::channel();
            let _ = queries.send(AdminQuery::Status(tx)).await;
            match rx.await {
                Ok(v) => {
                    respond(&mut stream, 200, "application/json", v.to_string().as_bytes()).await
                }
                Err(_) => {
                    respond(&mut stream, 503, "text/plain", b"core loop not answering\n").await
                }
            }
        }
        "/metrics" => {
            let (tx, rx) = oneshot::channel();
            let _ = queries.send(AdminQuery::Metrics(tx)).await;
            match rx.await {
                Ok(text) => {
                    respond(&mut stream, 200, "text/plain; version=0.0.4", text.as_bytes()).await
                }
                Err(_) => {
                    respond(&mut stream, 503, "text/plain", b"core loop not answering\n").await
                }
            }
        }
        "/" => respond(&mut stream, 200, "text/html; charset=utf-8", PAGE.as_bytes()).await,
        _ => {
            respond(
                &mut stream,
                404,
                "text/plain",
                b"not found: try /, /status, /metrics, /healthz\n",
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    code: u16,
    kind: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

/// The status page: polls `/status` every 2 s and draws every world's regions (x/z plane),
/// coloured by the site simulating them, with players as dots coloured by home site.
const PAGE: &str = include_str!("status.html");
