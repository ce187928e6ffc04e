//! The fake API server's HTTP face (axum): the core/v1 paths the driver and kube-runtime call,
//! with the real server's shapes: `Status` objects for refusals, list metadata with a
//! resourceVersion and continue tokens, watch streams of newline-separated events with
//! bookmarks, and an `ERROR` event with code 410 for a resourceVersion compacted away.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Shared;
use super::store::{Key, Refusal, Selector};

/// A watch stream sends a bookmark this often when asked to (`allowWatchBookmarks`).
const BOOKMARK_EVERY: Duration = Duration::from_secs(2);
/// A watch without `timeoutSeconds` ends after this long, as the real server's does.
const DEFAULT_WATCH_S: u64 = 1800;
/// The resources served, by API group: core/v1's at `/api/v1`, policy/v1's at
/// `/apis/policy/v1` (the disruption budgets that evictions honour).
const CORE: [&str; 2] = ["pods", "secrets"];
const POLICY: [&str; 1] = ["poddisruptionbudgets"];
const POLICY_PREFIX: &str = "/apis/policy/v1/";

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/api/v1/namespaces/{ns}/{resource}", get(list_or_watch).post(create))
        .route("/api/v1/namespaces/{ns}/{resource}/{name}", get(read).delete(delete).patch(patch))
        .route("/api/v1/namespaces/{ns}/pods/{name}/eviction", post(evict))
        .route("/apis/policy/v1/namespaces/{ns}/{resource}", get(list_or_watch).post(create))
        .route("/apis/policy/v1/namespaces/{ns}/{resource}/{name}", get(read).delete(delete))
        .with_state(shared)
}

type Answer = Result<Response, Refusal>;

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, axum::Json(self.status())).into_response()
    }
}

fn object(code: StatusCode, value: Value) -> Response {
    (code, axum::Json(value)).into_response()
}

/// Refuses what the fake does not serve (a resource of another group at this path), and
/// everything while it is told to fail.
fn admit(shared: &Shared, path: &Uri, resource: &str) -> Result<(), Refusal> {
    if let Some(code) = shared.failing() {
        return Err(Refusal::new(code, "InternalError", "the fake API server was told to fail"));
    }
    let served: &[&str] = if path.path().starts_with(POLICY_PREFIX) { &POLICY } else { &CORE };
    if !served.contains(&resource) {
        return Err(Refusal::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({resource})"),
        ));
    }
    Ok(())
}

async fn version() -> Response {
    object(
        StatusCode::OK,
        json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0-horizon-fake"}),
    )
}

async fn list_or_watch(
    State(shared): State<Arc<Shared>>,
    path: Uri,
    Path((ns, resource)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    admit(&shared, &path, &resource)?;
    let selector = Selector::parse(query.get("labelSelector").map_or("", String::as_str))?;
    let rv = match query.get("resourceVersion").filter(|v| !v.is_empty()) {
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            Refusal::new(
                400,
                "BadRequest",
                format!("resourceVersion {v:?}: not a resourceVersion of this server"),
            )
        })?),
        None => None,
    };
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let timeout =
            query.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(DEFAULT_WATCH_S);
        let bookmarks = query.get("allowWatchBookmarks").is_some_and(|b| b == "true");
        let watch =
            Watch { ns, resource, selector, bookmarks, timeout: Duration::from_secs(timeout) };
        return Ok(watch.start(shared, rv));
    }
    let limit: usize =
        query.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let offset: usize = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => token
            .parse()
            .map_err(|_| Refusal::new(400, "BadRequest", "continue: not a token of this server"))?,
        None => 0,
    };
    let objects = shared.objects();
    let all = objects.list(&resource, &ns, &selector);
    let page: Vec<Value> = all.iter().skip(offset).take(limit).cloned().collect();
    let more = offset + page.len() < all.len();
    let mut metadata = json!({"resourceVersion": objects.rv().to_string()});
    if more {
        metadata["continue"] = json!((offset + page.len()).to_string());
    }
    let (kind, version) = match resource.as_str() {
        "pods" => ("PodList", "v1"),
        "secrets" => ("SecretList", "v1"),
        _ => ("PodDisruptionBudgetList", "policy/v1"),
    };
    Ok(object(
        StatusCode::OK,
        json!({"kind": kind, "apiVersion": version, "metadata": metadata, "items": page}),
    ))
}

async fn create(
    State(shared): State<Arc<Shared>>,
    path: Uri,
    Path((ns, resource)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    admit(&shared, &path, &resource)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| Refusal::new(400, "BadRequest", format!("the body is not JSON: {e}")))?;
    let created = shared.mutate(|o, now| o.create(&resource, &ns, value, now))?;
    Ok(object(StatusCode::CREATED, created))
}

async fn read(
    State(shared): State<Arc<Shared>>,
    path: Uri,
    Path((ns, resource, name)): Path<(String, String, String)>,
) -> Answer {
    admit(&shared, &path, &resource)?;
    let found = shared.objects().get(&(resource.clone(), ns, name.clone())).cloned();
    let found = found
        .ok_or_else(|| Refusal::new(404, "NotFound", format!("{resource} \"{name}\" not found")))?;
    Ok(object(StatusCode::OK, found))
}

async fn delete(
    State(shared): State<Arc<Shared>>,
    path: Uri,
    Path((ns, resource, name)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    admit(&shared, &path, &resource)?;
    let options: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| Refusal::new(400, "BadRequest", format!("DeleteOptions: {e}")))?
    };
    let grace = options["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()));
    let key: Key = (resource, ns, name);
    let deleted = shared.mutate(|o, now| o.delete(&key, grace, now))?;
    Ok(object(StatusCode::OK, deleted))
}

/// `POST pods/{name}/eviction` with an `Eviction` (policy/v1): the pod deleted gracefully
/// unless a disruption budget forbids it now (429; the client tries again later, as
/// `kubectl drain` does).
async fn evict(
    State(shared): State<Arc<Shared>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    if let Some(code) = shared.failing() {
        return Err(Refusal::new(code, "InternalError", "the fake API server was told to fail"));
    }
    let eviction: Value = serde_json::from_slice(&body)
        .map_err(|e| Refusal::new(400, "BadRequest", format!("the body is not JSON: {e}")))?;
    // The kind may be left out (kube's client does, and spells its options `delete_options`,
    // which the real server ignores as an unknown field, as this one does).
    if eviction["kind"].as_str().is_some_and(|k| k != "Eviction") {
        return Err(Refusal::new(400, "BadRequest", "the body is not an Eviction"));
    }
    if eviction["metadata"]["name"].as_str().is_some_and(|n| n != name) {
        return Err(Refusal::new(
            400,
            "BadRequest",
            format!("name in URL does not match name in Eviction object ({name})"),
        ));
    }
    let grace = eviction["deleteOptions"]["gracePeriodSeconds"].as_i64();
    let key: Key = ("pods".into(), ns, name);
    shared.mutate(|o, now| o.evict(&key, grace, now))?;
    let done = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    Ok(object(StatusCode::CREATED, done))
}

/// A JSON merge patch (`application/merge-patch+json`), the only kind modelled.
async fn patch(
    State(shared): State<Arc<Shared>>,
    path: Uri,
    Path((ns, resource, name)): Path<(String, String, String)>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Answer {
    admit(&shared, &path, &resource)?;
    let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if kind != "application/merge-patch+json" {
        return Err(Refusal::new(
            415,
            "UnsupportedMediaType",
            format!("{kind:?}: only merge patches are modelled"),
        ));
    }
    let change: Value = serde_json::from_slice(&body)
        .map_err(|e| Refusal::new(400, "BadRequest", format!("the patch is not JSON: {e}")))?;
    let key: Key = (resource.clone(), ns, name.clone());
    let patched = shared.mutate(|o, _| {
        o.modify(&key, |obj| merge(obj, &change)).ok_or_else(|| {
            Refusal::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
        })
    })?;
    Ok(object(StatusCode::OK, patched))
}

/// RFC 7386.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (k, v) in fields {
        if v.is_null() {
            if let Some(t) = target.as_object_mut() {
                t.remove(k);
            }
        } else {
            merge(&mut target[k], v);
        }
    }
}

/// One watch request.
struct Watch {
    ns: String,
    resource: String,
    selector: Selector,
    bookmarks: bool,
    timeout: Duration,
}

impl Watch {
    /// The streaming response; a task writes its lines until the client leaves or the
    /// timeout ends it.
    fn start(self, shared: Arc<Shared>, rv: Option<u64>) -> Response {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(self.run(shared, rv, tx));
        let body = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
        });
        Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(body))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }

    fn line(kind: &str, object: &Value) -> Bytes {
        let mut line = json!({"type": kind, "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
    }

    async fn run(self, shared: Arc<Shared>, rv: Option<u64>, tx: mpsc::Sender<Bytes>) {
        let mut changed = shared.subscribe();
        let generation = shared.watch_generation.load(std::sync::atomic::Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut bookmark = tokio::time::interval(BOOKMARK_EVERY);
        bookmark.tick().await;
        // No resourceVersion (or "0"): the current objects as ADDED, then what follows.
        let mut seen = match rv.filter(|rv| *rv > 0) {
            Some(rv) => rv,
            None => {
                let (rv, lines) = {
                    let objects = shared.objects();
                    let current = objects.list(&self.resource, &self.ns, &self.selector);
                    (
                        objects.rv(),
                        current.iter().map(|o| Watch::line("ADDED", o)).collect::<Vec<_>>(),
                    )
                };
                for line in lines {
                    if tx.send(line).await.is_err() {
                        return;
                    }
                }
                rv
            }
        };
        loop {
            let (lines, gone) = {
                let objects = shared.objects();
                let lines = objects.since(seen).map(|changes| {
                    changes
                        .filter(|c| {
                            c.key.0 == self.resource
                                && c.key.1 == self.ns
                                && self.selector.matches(&c.object)
                        })
                        .map(|c| Watch::line(c.kind.wire(), &c.object))
                        .collect::<Vec<_>>()
                });
                let gone = lines.is_none().then(|| {
                    let why = format!("too old resource version: {seen} ({})", objects.rv());
                    Watch::line("ERROR", &Refusal::new(410, "Expired", why).status())
                });
                seen = objects.rv();
                (lines.unwrap_or_default(), gone)
            };
            for line in lines {
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            if let Some(gone) = gone {
                let _ = tx.send(gone).await;
                return;
            }
            tokio::select! {
                result = changed.changed() => if result.is_err() { return },
                _ = bookmark.tick(), if self.bookmarks => {
                    let kind = if self.resource == "pods" { "Pod" } else { "Secret" };
                    let mark = json!({"kind": kind, "apiVersion": "v1",
                                      "metadata": {"resourceVersion": seen.to_string()}});
                    if tx.send(Watch::line("BOOKMARK", &mark)).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
            let restarted =
                shared.watch_generation.load(std::sync::atomic::Ordering::SeqCst) != generation;
            if restarted || shared.failing().is_some() {
                return;
            }
        }
    }
}
