//! # horizon-admin — the daemons' admin HTTP API
//!
//! The core and every agent serve the same small API on their admin port (axum, HTTP/1.1):
//! read-only but for one action, a game server's drain. Bind it to an operator network:
//!
//! | path | answers |
//! |---|---|
//! | `GET /livez` | `200 ok` while the process serves HTTP: never calls into the daemon's loop |
//! | `GET /readyz` | `200 ready`, or `503` with the reason (core: its loop answers; agent: registered with the core and a ready game server) |
//! | `GET /metrics` | the daemon's Prometheus registry, text format 0.0.4 (docs/metrics.md) |
//! | `GET /status` | the daemon's status document (JSON); `?players=N&after=ID` pages its player list |
//! | `GET /measure.csv` | core only: the probe tables of the players online, `player,site,rtt_ms` (stage 1; `horizon sim measure --csv` reads it). Authenticated readers only: `403` without the token |
//! | `GET /` | the daemon's page, if it has one (the core's console) |
//! | `POST /servers/{name}/drain` | agent only: game server `name` is told to stop (SIGTERM; a pod's deletion) and moves its regions to other servers of the site first. `202` with what was done; `404` unknown server; `409` already stopping, or nowhere to go; authenticated callers only (`403` without the token, `401` with a wrong one) |
//!
//! **Who reads what** ([`Access`]): probes and metrics are open (they name no player: metric
//! labels are bounded). Player ids and positions in `/status` are for authenticated readers
//! only: with a token in `HORIZON_ADMIN_TOKEN`, or in the file `HORIZON_ADMIN_TOKEN_FILE` names
//! (read again at every such request: a rotated token counts at once), a reader sending
//! `Authorization: Bearer <token>` gets them, one without the header gets the document without them, and one with a
//! wrong token gets `401`. Without a token, an API bound to loopback trusts every reader (the
//! local mesh), and one bound elsewhere shows no player to anyone (and says so in its log).
//!
//! [`overrides`] lets the environment set configuration values over a daemon's file.
//!
//! A daemon gives its [`Registry`] (from [`registry`]: `horizon_build_info` and the process
//! collector already in) and two callbacks ([`Source`]) that ask its loop, each given
//! [`LOOP_TIMEOUT`] to answer.

pub mod overrides;
pub mod reference;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};
use serde::Deserialize;

/// A loop that has not answered after this is reported not ready (`/readyz`, `/status`).
pub const LOOP_TIMEOUT: Duration = Duration::from_secs(2);
/// Players listed in one `/status` page by default, and at most.
pub const DEFAULT_PLAYERS: usize = 1000;
pub const MAX_PLAYERS: usize = 10_000;

/// A boxed future, as the callbacks return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The environment variable holding the admin API's bearer token.
pub const TOKEN_ENV: &str = "HORIZON_ADMIN_TOKEN";
/// The environment variable naming a file that holds the admin token (it wins over
/// [`TOKEN_ENV`]; a mounted Secret: rotated without a restart).
pub const TOKEN_FILE_ENV: &str = "HORIZON_ADMIN_TOKEN_FILE";

/// Which players a `/status` request wants: at most `limit`, with ids above `after`. Without
/// `private`, the reader is not authenticated: no player id or position at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    pub after: Option<u64>,
    pub limit: usize,
    pub private: bool,
}

impl Default for Page {
    fn default() -> Self {
        Page { after: None, limit: DEFAULT_PLAYERS, private: true }
    }
}

/// Who the API trusts with player ids and positions. See the crate documentation.
#[derive(Clone)]
pub enum Access {
    /// Every reader (an API bound to loopback, no token).
    Open,
    /// Readers presenting this bearer token.
    Token(String),
    /// Nobody (bound beyond loopback with no token).
    Anonymous,
    /// The token in this file, read at each request that asks for players; while the file is
    /// missing or empty, as without a token (`loopback`: every reader; else nobody).
    TokenFile { path: std::path::PathBuf, loopback: bool },
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.write_str(match self {
            Access::Open => "Open",
            Access::Token(_) => "Token(..)",
            Access::Anonymous => "Anonymous",
            Access::TokenFile { .. } => "TokenFile(..)",
        })
    }
}

impl Access {
    /// The access of an API bound to `bind`, with `token` (an empty one counts as none).
    pub fn for_bind(bind: std::net::SocketAddr, token: Option<String>) -> Access {
        match token.filter(|t| !t.is_empty()) {
            Some(t) => Access::Token(t),
            None if bind.ip().is_loopback() => Access::Open,
            None => {
                tracing::warn!(%bind, "admin API beyond loopback with no {TOKEN_ENV}: /status shows no player to anyone");
                Access::Anonymous
            }
        }
    }

    /// The token file [`TOKEN_FILE_ENV`] names if set, else [`Access::for_bind`] with the token
    /// from [`TOKEN_ENV`].
    pub fn from_env(bind: std::net::SocketAddr) -> Access {
        match std::env::var_os(TOKEN_FILE_ENV).filter(|p| !p.is_empty()) {
            Some(path) => {
                Access::TokenFile { path: path.into(), loopback: bind.ip().is_loopback() }
            }
            None => Access::for_bind(bind, std::env::var(TOKEN_ENV).ok()),
        }
    }

    /// Whether a request with these headers may see players; `Err` for a wrong token.
    fn private(&self, headers: &axum::http::HeaderMap) -> Result<bool, ()> {
        if let Access::TokenFile { path, loopback } = self {
            let token = std::fs::read_to_string(path).map(|t| t.trim().to_owned());
            return match token {
                Ok(t) if !t.is_empty() => Access::Token(t).private(headers),
                _ => Ok(*loopback),
            };
        }
        let Access::Token(token) = self else { return Ok(matches!(self, Access::Open)) };
        let Some(given) = headers.get(header::AUTHORIZATION) else { return Ok(false) };
        let given = given.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).ok_or(())?;
        if same(given.as_bytes(), token.as_bytes()) { Ok(true) } else { Err(()) }
    }
}

/// Compares in time independent of where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the API asks the daemon.
pub trait Source: Send + Sync + 'static {
    /// `Ok` when ready to serve, else why not.
    fn ready(&self) -> BoxFuture<Result<(), String>>;
    /// The status document, or why it cannot be had.
    fn status(&self, page: Page) -> BoxFuture<Result<serde_json::Value, String>>;
    /// Called before `/metrics` renders the registry: bring values kept elsewhere (atomics)
    /// into it. Must not wait on the daemon's loop.
    fn refresh(&self) {}
    /// `/measure.csv`, for a daemon that keeps probe tables (`Ok(None)`: it keeps none, 404).
    fn measure_csv(&self) -> BoxFuture<Result<Option<String>, String>> {
        Box::pin(async { Ok(None) })
    }
    /// `POST /servers/{name}/drain`, for a daemon that runs game servers: `Ok` says what was
    /// done; a refusal says why, with its status.
    fn drain(&self, _server: String) -> BoxFuture<Result<String, Refused>> {
        Box::pin(async { Err(Refused::NotFound("this daemon runs no game server".into())) })
    }
}

/// Why an action was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `404`: nothing of that name.
    NotFound(String),
    /// `409`: not in this state (already stopping, nowhere to go).
    Conflict(String),
    /// `503`: the daemon cannot act now (its loop is gone).
    Unavailable(String),
}

/// A daemon's registry: every metric name starts with `horizon_`; `horizon_build_info` and
/// the process collector (`process_*`: CPU, memory, open files) are registered.
pub fn registry(daemon: &str) -> Registry {
    let registry = Registry::new();
    let build = IntGaugeVec::new(
        Opts::new("horizon_build_info", "1, labelled with the build's version and the daemon."),
        &["version", "daemon"],
    )
    .unwrap_or_else(|e| unreachable!("a valid metric: {e}"));
    build.with_label_values(&[env!("CARGO_PKG_VERSION"), daemon]).set(1);
    register(&registry, Box::new(build));
    register(&registry, Box::new(prometheus::process_collector::ProcessCollector::for_self()));
    registry
}

/// Registers a collector; a name registered twice is a programming error, logged.
pub fn register(registry: &Registry, collector: Box<dyn prometheus::core::Collector>) {
    if let Err(e) = registry.register(collector) {
        tracing::error!(error = %e, "metric not registered");
    }
}

/// The registry's exposition text.
pub fn render(registry: &Registry) -> String {
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&registry.gather(), &mut out) {
        tracing::error!(error = %e, "metrics not encoded");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The names of the `horizon_` metrics the registry exports now (those with a series: a
/// labelled family appears once it has one).
pub fn metric_names(registry: &Registry) -> std::collections::BTreeSet<String> {
    registry
        .gather()
        .iter()
        .map(|family| family.name().to_owned())
        .filter(|name| name.starts_with("horizon_"))
        .collect()
}

struct App {
    registry: Registry,
    source: Arc<dyn Source>,
    page: Option<&'static str>,
    access: Access,
}

#[derive(Deserialize)]
struct StatusParams {
    players: Option<usize>,
    after: Option<u64>,
}

/// The API's routes (for tests; [`serve`] runs them).
pub fn router(
    registry: Registry,
    source: Arc<dyn Source>,
    page: Option<&'static str>,
    access: Access,
) -> Router {
    let app = Arc::new(App { registry, source, page, access });
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/measure.csv", get(measure_csv))
        .route("/servers/{server}/drain", post(drain))
        .route("/", get(index))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found: try /, /livez, /readyz, /metrics, /status, /measure.csv\n",
            )
        })
        .with_state(app)
}

/// Serves the API on `listener` until `stop` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Registry,
    source: Arc<dyn Source>,
    page: Option<&'static str>,
    access: Access,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(registry, source, page, access);
    axum::serve(listener, app).with_graceful_shutdown(stop).await
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    match tokio::time::timeout(LOOP_TIMEOUT, app.source.ready()).await {
        Ok(Ok(())) => "ready\n".into_response(),
        Ok(Err(why)) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "not ready: the loop does not answer\n")
            .into_response(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    app.source.refresh();
    let body = render(&app.registry);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

async fn status(
    State(app): State<Arc<App>>,
    headers: axum::http::HeaderMap,
    Query(q): Query<StatusParams>,
) -> Response {
    let Ok(private) = app.access.private(&headers) else {
        return (StatusCode::UNAUTHORIZED, "wrong admin token\n").into_response();
    };
    let limit = q.players.unwrap_or(DEFAULT_PLAYERS).min(MAX_PLAYERS);
    let page = Page { after: q.after, limit, private };
    match tokio::time::timeout(LOOP_TIMEOUT, app.source.status(page)).await {
        Ok(Ok(doc)) => (
            [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")],
            doc.to_string(),
        )
            .into_response(),
        Ok(Err(why)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the loop does not answer\n").into_response(),
    }
}

/// `None` for a caller with the admin token (or any on an open API); else the answer: `401`
/// for a wrong token, `403` saying `needs` without one.
fn refused(app: &App, headers: &axum::http::HeaderMap, needs: &str) -> Option<Response> {
    match app.access.private(headers) {
        Err(()) => Some((StatusCode::UNAUTHORIZED, "wrong admin token\n").into_response()),
        Ok(false) => {
            let why = format!("{needs}: send the admin token (Authorization: Bearer)\n");
            Some((StatusCode::FORBIDDEN, why).into_response())
        }
        Ok(true) => None,
    }
}

async fn measure_csv(State(app): State<Arc<App>>, headers: axum::http::HeaderMap) -> Response {
    if let Some(refused) = refused(&app, &headers, "player ids") {
        return refused;
    }
    match tokio::time::timeout(LOOP_TIMEOUT, app.source.measure_csv()).await {
        Ok(Ok(Some(csv))) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            csv,
        )
            .into_response(),
        Ok(Ok(None)) => {
            (StatusCode::NOT_FOUND, "this daemon keeps no probe tables\n").into_response()
        }
        Ok(Err(why)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the loop does not answer\n").into_response(),
    }
}

async fn drain(
    State(app): State<Arc<App>>,
    headers: axum::http::HeaderMap,
    Path(server): Path<String>,
) -> Response {
    if let Some(refused) = refused(&app, &headers, "a drain") {
        return refused;
    }
    match tokio::time::timeout(LOOP_TIMEOUT, app.source.drain(server)).await {
        Ok(Ok(done)) => (StatusCode::ACCEPTED, format!("{done}\n")).into_response(),
        Ok(Err(Refused::NotFound(why))) => {
            (StatusCode::NOT_FOUND, format!("{why}\n")).into_response()
        }
        Ok(Err(Refused::Conflict(why))) => {
            (StatusCode::CONFLICT, format!("{why}\n")).into_response()
        }
        Ok(Err(Refused::Unavailable(why))) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the loop does not answer\n").into_response(),
    }
}

async fn index(State(app): State<Arc<App>>) -> Response {
    match app.page {
        Some(html) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        None => "horizon: /livez /readyz /metrics /status\n".into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fake {
        ready: bool,
    }

    impl Source for Fake {
        fn ready(&self) -> BoxFuture<Result<(), String>> {
            let ready = self.ready;
            Box::pin(async move { if ready { Ok(()) } else { Err("not registered".into()) } })
        }
        fn status(&self, page: Page) -> BoxFuture<Result<serde_json::Value, String>> {
            Box::pin(async move {
                Ok(serde_json::json!({
                    "limit": page.limit, "after": page.after, "private": page.private
                }))
            })
        }
        fn drain(&self, server: String) -> BoxFuture<Result<String, Refused>> {
            Box::pin(async move {
                match server.as_str() {
                    "gs-0" => Ok("gs-0 told to stop".into()),
                    "gs-1" => Err(Refused::Conflict("gs-1 is stopping already".into())),
                    _ => Err(Refused::NotFound(format!("no game server {server}"))),
                }
            })
        }
    }

    async fn post(addr: std::net::SocketAddr, path: &str, headers: &str) -> (u16, String) {
        call(addr, "POST", path, &format!("{headers}content-length: 0\r\n")).await
    }

    #[tokio::test]
    async fn a_drain_is_for_the_token_s_holder_and_says_what_happened() {
        let addr = start_with(true, Access::Token("s3cret".into())).await;
        let token = "authorization: Bearer s3cret\r\n";
        assert_eq!(post(addr, "/servers/gs-0/drain", "").await.0, 403, "no token");
        let wrong = post(addr, "/servers/gs-0/drain", "authorization: Bearer nope\r\n").await;
        assert_eq!(wrong.0, 401);
        assert_eq!(
            post(addr, "/servers/gs-0/drain", token).await,
            (202, "gs-0 told to stop\n".into())
        );
        assert_eq!(post(addr, "/servers/gs-1/drain", token).await.0, 409);
        assert_eq!(post(addr, "/servers/gs-9/drain", token).await.0, 404);
        assert_eq!(
            get_with(addr, "/servers/gs-0/drain", token).await.0,
            405,
            "a GET drains nothing"
        );
        // Beyond loopback without a token: nobody may drain.
        let addr = start_with(true, Access::Anonymous).await;
        assert_eq!(post(addr, "/servers/gs-0/drain", token).await.0, 403);
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        get_with(addr, path, "").await
    }

    async fn get_with(addr: std::net::SocketAddr, path: &str, headers: &str) -> (u16, String) {
        call(addr, "GET", path, headers).await
    }

    /// One HTTP/1.1 request: the status and the body.
    async fn call(
        addr: std::net::SocketAddr,
        method: &str,
        path: &str,
        headers: &str,
    ) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connects");
        let req =
            format!("{method} {path} HTTP/1.1\r\nhost: x\r\n{headers}connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("sends");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("reads");
        let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (code, body)
    }

    async fn start(ready: bool) -> std::net::SocketAddr {
        start_with(ready, Access::Open).await
    }

    async fn start_with(ready: bool, access: Access) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let registry = registry("test");
        tokio::spawn(serve(
            listener,
            registry,
            Arc::new(Fake { ready }),
            None,
            access,
            std::future::pending(),
        ));
        addr
    }

    #[tokio::test]
    async fn probes_metrics_and_status_answer_as_documented() {
        let addr = start(true).await;
        assert_eq!(get(addr, "/livez").await, (200, "ok\n".into()));
        assert_eq!(get(addr, "/readyz").await, (200, "ready\n".into()));
        let (code, text) = get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(text.contains("horizon_build_info{daemon=\"test\",version=\""), "{text}");
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
        let (code, body) = get(addr, "/status?players=50000&after=7").await;
        assert_eq!(code, 200);
        let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(doc["limit"], MAX_PLAYERS, "capped");
        assert_eq!(doc["after"], 7);
        assert_eq!(get(addr, "/nope").await.0, 404);
    }

    #[tokio::test]
    async fn not_ready_says_why() {
        let addr = start(false).await;
        assert_eq!(get(addr, "/livez").await.0, 200, "alive all the same");
        assert_eq!(get(addr, "/readyz").await, (503, "not ready: not registered\n".into()));
    }

    #[tokio::test]
    async fn players_are_for_authenticated_readers_only() {
        let private = |body: &str| -> bool {
            let doc: serde_json::Value = serde_json::from_str(body).expect("json");
            doc["private"].as_bool().expect("said")
        };
        let addr = start_with(true, Access::Token("s3cret".into())).await;
        let (code, body) = get(addr, "/status").await;
        assert_eq!(code, 200, "the document, without players");
        assert!(!private(&body));
        let (code, body) = get_with(addr, "/status", "authorization: Bearer s3cret\r\n").await;
        assert_eq!(code, 200);
        assert!(private(&body), "the token's holder sees players");
        let wrong = get_with(addr, "/status", "authorization: Bearer s3cre7\r\n").await;
        assert_eq!(wrong, (401, "wrong admin token\n".into()));
        let not_bearer = get_with(addr, "/status", "authorization: Basic czNjcmV0\r\n").await;
        assert_eq!(not_bearer.0, 401);
        assert_eq!(get(addr, "/metrics").await.0, 200, "metrics stay open");
        assert_eq!(get(addr, "/readyz").await.0, 200, "probes stay open");
        // Beyond loopback with no token: nobody sees players; on loopback, everyone.
        let wide = "0.0.0.0:7480".parse().expect("address");
        assert!(matches!(Access::for_bind(wide, None), Access::Anonymous));
        assert!(matches!(Access::for_bind(wide, Some(String::new())), Access::Anonymous));
        let local = "127.0.0.1:7480".parse().expect("address");
        assert!(matches!(Access::for_bind(local, None), Access::Open));
        let addr = start_with(true, Access::Anonymous).await;
        let (_, body) = get_with(addr, "/status", "authorization: Bearer anything\r\n").await;
        assert!(!private(&body));
        assert_eq!(format!("{:?}", Access::Token("s3cret".into())), "Token(..)", "never logged");
    }

    #[tokio::test]
    async fn a_token_file_is_read_at_each_request_so_a_rotation_counts_at_once() {
        let private = |body: &str| -> bool {
            let doc: serde_json::Value = serde_json::from_str(body).expect("json");
            doc["private"].as_bool().expect("said")
        };
        let dir = std::env::temp_dir().join(format!("horizon-admin-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("admin-token");
        let _ = std::fs::remove_file(&path);
        let access = Access::TokenFile { path: path.clone(), loopback: false };
        let addr = start_with(true, access).await;
        let status = |auth: &'static str| get_with(addr, "/status", auth);
        // No file yet, beyond loopback: nobody sees players.
        assert!(!private(&status("authorization: Bearer old\r\n").await.1));
        std::fs::write(&path, "old\n").expect("token");
        assert!(private(&status("authorization: Bearer old\r\n").await.1), "the file's token");
        // Rotated: the old one is wrong at once, the new one right.
        std::fs::write(&path, "new").expect("token");
        assert_eq!(status("authorization: Bearer old\r\n").await.0, 401);
        assert!(private(&status("authorization: Bearer new\r\n").await.1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
