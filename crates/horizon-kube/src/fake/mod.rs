//! A fake Kubernetes API server with a fake kubelet, to run the [`crate::KubernetesDriver`]
//! without a cluster: `horizon demo --driver kube` and this crate's tests.
//!
//! **What it models** (core/v1 `pods` and `secrets`, namespaced): create (409 AlreadyExists,
//! 422 for a pod without containers or images), get, delete with a grace period (a running
//! pod is marked with `deletionTimestamp`; the kubelet sends SIGTERM, then SIGKILL after the
//! grace, then removes it), JSON merge patch; a resourceVersion on every change; list with
//! `limit` / `continue`; `?watch=true` from a resourceVersion, with bookmarks, and an `ERROR`
//! event with code 410 (Expired) for a resourceVersion compacted away ([`FakeApi::compact`],
//! or past the last 4096 changes); equality-based label selectors; ownerReference garbage
//! collection (background). policy/v1 `poddisruptionbudgets` (create, get, list, delete) and
//! the pods' `eviction` subresource (what `kubectl drain` and the cluster autoscaler call):
//! the pod deleted with its grace, or 429 `TooManyRequests` while a budget selecting it by
//! `matchLabels` allows no disruption (counted from its pods, Ready and not being deleted;
//! `minAvailable` or `maxUnavailable`, counts or percentages). The kubelet runs each pod's game-server container `command` +
//! `args` as a local process with its `env` (`value`, `secretKeyRef` from a Secret of the
//! fake, `fieldRef` to the pod's name, namespace, uid and IP), reports `Running` with
//! `Ready=True`, and on exit `terminated` with the exit code (`Completed`, `Error`, or the
//! `OOMKilled` / `Evicted` of [`FakeApi::oom_kill`] and [`FakeApi::evict`]), phase
//! `Succeeded` or `Failed`. [`FakeApi::fail`] makes every request answer an error.
//!
//! **What it does not model**: images (the command runs on this machine), volumes and
//! mounts, resource requests and limits, readiness and liveness probes (a running container
//! is ready), restart policies (containers never restart), init containers and sidecars
//! (only one container runs), scheduling (every pod goes to one node, unless its
//! `spec.nodeName` names another: then nothing runs it), authentication and RBAC, admission,
//! set-based selectors, field selectors, a budget's status and its
//! `unhealthyPodEvictionPolicy` (an unhealthy pod is always evicted), server-side apply and strategic merge patches, a
//! consistent snapshot across list pages, DELETED events for objects that stop matching a
//! watch's selector, the `status` subresource, and every other resource.

mod api;
mod kubelet;
pub(crate) mod store;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::watch;

use store::{Key, Objects, Refusal};

/// The node the kubelet runs pods on.
pub const NODE: &str = "horizon-fake-node";

/// What the HTTP handlers and the kubelet share.
#[derive(Debug)]
pub(crate) struct Shared {
    objects: Mutex<Objects>,
    /// The resourceVersion, each time it moves: watches and the kubelet wake on it.
    changed: watch::Sender<u64>,
    failing: Mutex<Option<u16>>,
    /// Bumped to end every open watch (as an API server restart would).
    pub(crate) watch_generation: std::sync::atomic::AtomicU64,
    kubelet: Mutex<kubelet::Processes>,
}

impl Shared {
    pub(crate) fn objects(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(crate) fn failing(&self) -> Option<u16> {
        *self.failing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a change that may be refused, and wakes the watches.
    pub(crate) fn mutate<T>(
        &self,
        change: impl FnOnce(&mut Objects, &str) -> Result<T, Refusal>,
    ) -> Result<T, Refusal> {
        self.update(change)
    }

    /// Runs a change and wakes the watches.
    pub(crate) fn update<T>(&self, change: impl FnOnce(&mut Objects, &str) -> T) -> T {
        let now = now_rfc3339();
        let (result, rv) = {
            let mut objects = self.objects();
            let result = change(&mut objects, &now);
            (result, objects.rv())
        };
        self.changed.send_replace(rv);
        result
    }
}

/// A running fake API server and kubelet. Dropping it stops both and kills every container.
#[derive(Debug)]
pub struct FakeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        kubelet::kill_all(&self.shared);
    }
}

impl FakeApi {
    /// Serves on `addr` (`127.0.0.1:0` picks a port) and starts the kubelet.
    pub async fn start(addr: SocketAddr) -> std::io::Result<FakeApi> {
        let shared = Arc::new(Shared {
            objects: Mutex::new(Objects::default()),
            changed: watch::channel(0).0,
            failing: Mutex::new(None),
            watch_generation: Default::default(),
            kubelet: Mutex::new(kubelet::Processes::default()),
        });
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = api::router(shared.clone());
        let serve = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "fake Kubernetes API stopped");
            }
        });
        let kubelet = tokio::spawn(kubelet::run(shared.clone()));
        Ok(FakeApi { addr, shared, tasks: vec![serve, kubelet] })
    }

    /// The API server's URL, for `servers.kubernetes.api`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates an object directly (a Secret the pods read, the agent's own pod).
    pub fn create(&self, resource: &str, namespace: &str, object: Value) -> Result<Value, String> {
        self.shared
            .mutate(|o, now| o.create(resource, namespace, object, now))
            .map_err(|r| r.message)
    }

    /// Creates a Secret holding `data` (plain text; stored base64 as the real one).
    pub fn create_secret(
        &self,
        namespace: &str,
        name: &str,
        data: &[(&str, &str)],
    ) -> Result<Value, String> {
        use base64::Engine as _;
        let encoded: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| {
                ((*k).to_owned(), json!(base64::engine::general_purpose::STANDARD.encode(v)))
            })
            .collect();
        self.create("secrets", namespace, json!({"metadata": {"name": name}, "data": encoded}))
    }

    /// A pod that stands for a process running elsewhere (the agent itself): the kubelet leaves
    /// it alone. Returns its uid, for ownerReferences.
    pub fn create_outside_pod(&self, namespace: &str, name: &str) -> Result<String, String> {
        let pod = json!({"metadata": {"name": name},
                         "spec": {"nodeName": "outside", "containers": [{"name": "agent", "image": "horizon"}]}});
        let created = self.create("pods", namespace, pod)?;
        Ok(created["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
    }

    /// Deletes an object as a client would (a pod: through the kubelet, with its grace).
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Result<(), String> {
        let key: Key = (resource.into(), namespace.into(), name.into());
        self.shared.mutate(|o, now| o.delete(&key, None, now)).map(|_| ()).map_err(|r| r.message)
    }

    /// The pods of `namespace`, as stored.
    pub fn pods(&self, namespace: &str) -> Vec<Value> {
        self.shared.objects().list("pods", namespace, &store::Selector::default())
    }

    /// Forgets the change log and ends every open watch: a client resuming from the
    /// resourceVersion it had gets 410 Gone, and must list again.
    pub fn compact(&self) {
        let rv = {
            let mut objects = self.shared.objects();
            objects.compact();
            objects.rv()
        };
        self.shared.watch_generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.shared.changed.send_replace(rv);
    }

    /// Every request answers `code` (`Some(503)`) until `fail(None)`; open watches end.
    pub fn fail(&self, code: Option<u16>) {
        *self.shared.failing.lock().unwrap_or_else(|p| p.into_inner()) = code;
        let rv = self.shared.objects().rv();
        self.shared.changed.send_replace(rv);
    }

    /// The kernel's OOM killer takes the pod's container (SIGKILL, `OOMKilled`, exit 137).
    pub fn oom_kill(&self, namespace: &str, name: &str) -> bool {
        kubelet::end(&self.shared, namespace, name, kubelet::Ending::OomKilled)
    }

    /// The kubelet evicts the pod (node pressure): its container killed, phase `Failed`,
    /// reason `Evicted`.
    pub fn evict(&self, namespace: &str, name: &str) -> bool {
        kubelet::end(&self.shared, namespace, name, kubelet::Ending::Evicted)
    }
}

/// `2026-12-02T06:01:02Z`, as the API server writes times.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_rfc3339() {
        let t = super::now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T", "{t}");
    }
}
