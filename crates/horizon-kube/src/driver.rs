//! [`KubernetesDriver`]: the agent's game servers as pods.
//!
//! The agent's loop never waits on the API server. `start` and `stop` queue an order (a
//! bounded queue) and return; a writer task carries the orders out one at a time, each call
//! with a deadline, backing off after failures. A watcher task (kube-runtime's watcher, with a
//! reflector keeping every pod of this run) turns what it sees into ended servers, each
//! reported once; `poll_ended` drains them. A watch that breaks or expires (410 Gone) is
//! restarted by the watcher, which lists again: a pod that vanished meanwhile is reported
//! then. At start the pods an earlier run of this site's agent left are deleted: only pods
//! with this site's labels and `managed-by=horizon-agent`, never anything else.

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use horizon_agent::{DriverError, ServerDriver};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use crate::options::KubeOptions;
use crate::pod::{self, server_of};
use crate::status::{Fate, fate};

/// Orders queued for the writer; beyond it `start` fails at once (the pool tries again).
const ORDER_QUEUE: usize = 256;
/// Every API call gets this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The writer's wait after a failed call, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A failed deletion is tried this many times (then the pod is left to the ownerReference's
/// garbage collection or the next run's orphan cleanup).
const DELETE_TRIES: u32 = 4;
/// The server ends a watch after this long; the watcher resumes it from its resourceVersion.
const WATCH_TIMEOUT_S: u32 = 240;

/// Why the driver could not be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("Kubernetes API URL {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("no Kubernetes API configured (not in a cluster, no KUBECONFIG): {0}")]
    Infer(String),
    #[error("Kubernetes client: {0}")]
    Client(String),
}

enum Order {
    Create {
        server: String,
        agent: String,
        /// The server's own credential (it names the server).
        token: String,
    },
    Delete {
        server: String,
        grace_s: u32,
    },
    /// Relabels a pod with its pool state.
    Pool {
        server: String,
        hosting: bool,
    },
}

/// Game servers as pods of the agent's namespace; see the module documentation.
pub struct KubernetesDriver {
    run: String,
    namespace: String,
    grace_s: u32,
    max_servers: usize,
    agent: Option<String>,
    orders: mpsc::Sender<Order>,
    /// Servers that ended, each once, from the watcher and the writer (bounded by the servers
    /// started: each is reported at most once).
    ended: mpsc::UnboundedReceiver<(String, String)>,
    /// Started and not ended.
    live: BTreeSet<String>,
    pods: Store<Pod>,
}

impl std::fmt::Debug for KubernetesDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesDriver")
            .field("run", &self.run)
            .field("namespace", &self.namespace)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

impl KubernetesDriver {
    /// Connects to the API server of `opts` (a URL, else in-cluster or `KUBECONFIG`) and starts
    /// the driver's tasks. Nothing is called yet: an unreachable API server is logged and
    /// retried, the agent serves on.
    pub async fn connect(opts: KubeOptions) -> Result<KubernetesDriver, KubeError> {
        let config = match &opts.api {
            Some(url) => url_config(url, &opts.namespace)?,
            None => kube::Config::infer().await.map_err(|e| KubeError::Infer(e.to_string()))?,
        };
        Ok(KubernetesDriver::with_client(client(config)?, opts))
    }

    /// The driver for the API server at `opts.api` (required here: nothing is discovered), from
    /// code that is not async but runs inside a tokio runtime.
    pub fn at_url(opts: KubeOptions) -> Result<KubernetesDriver, KubeError> {
        let url = opts
            .api
            .clone()
            .ok_or_else(|| KubeError::Url { url: String::new(), why: "no URL given".into() })?;
        let config = url_config(&url, &opts.namespace)?;
        Ok(KubernetesDriver::with_client(client(config)?, opts))
    }

    /// The driver over `client` (a real one, or a mocked service in tests).
    ///
    /// (kube's TLS to an `https` API server takes rustls' process-wide crypto provider: see
    /// [`client`].)
    pub fn with_client(client: kube::Client, opts: KubeOptions) -> KubernetesDriver {
        let run = format!("{:06x}", fastrand::u32(..0x100_0000));
        let api: Api<Pod> = Api::namespaced(client, &opts.namespace);
        let (orders, orders_rx) = mpsc::channel(ORDER_QUEUE);
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let (pods, writer) = reflector::store();
        let reported = Arc::new(Mutex::new(HashSet::new()));
        let watch = watcher::Config::default()
            .labels(&pod::run_selector(&opts.site, &run))
            .timeout(WATCH_TIMEOUT_S);
        let stream = reflector::reflector(writer, watcher(api.clone(), watch)).default_backoff();
        tokio::spawn(watch_pods(stream, ended_tx.clone(), reported.clone(), opts.site.clone()));
        let driver = KubernetesDriver {
            run: run.clone(),
            namespace: opts.namespace.clone(),
            grace_s: opts.grace_s,
            max_servers: opts.max_servers,
            agent: opts.agent.clone(),
            orders,
            ended,
            live: BTreeSet::new(),
            pods,
        };
        tracing::info!(site = %opts.site, namespace = %opts.namespace, %run, "Kubernetes driver started");
        tokio::spawn(write_pods(api, opts, run, orders_rx, ended_tx));
        driver
    }

    /// This run's id (the `horizon.dev/agent-run` label of its pods).
    pub fn run(&self) -> &str {
        &self.run
    }

    fn order(&self, order: Order) -> Result<(), DriverError> {
        self.orders.try_send(order).map_err(|_| DriverError::Unavailable {
            why: format!("{ORDER_QUEUE} pod orders already wait for the Kubernetes API"),
        })
    }
}

impl ServerDriver for KubernetesDriver {
    fn start(&mut self, name: &str, agent: SocketAddr, token: &str) -> Result<(), DriverError> {
        if self.live.len() >= self.max_servers {
            return Err(DriverError::Full { max: self.max_servers });
        }
        let agent = self.agent.clone().unwrap_or_else(|| agent.to_string());
        self.order(Order::Create { server: name.to_owned(), agent, token: token.to_owned() })?;
        self.live.insert(name.to_owned());
        Ok(())
    }

    fn stop(&mut self, name: &str) {
        if self.live.remove(name) {
            let order = Order::Delete { server: name.to_owned(), grace_s: self.grace_s };
            if let Err(e) = self.order(order) {
                // Left to the ownerReference's collection or the next run's orphan cleanup.
                tracing::warn!(server = name, error = %e, "game-server pod not deleted");
            }
        }
    }

    fn poll_ended(&mut self) -> Vec<(String, String)> {
        let mut ended = Vec::new();
        while let Ok((server, why)) = self.ended.try_recv() {
            if self.live.remove(&server) {
                ended.push((server, why));
            }
        }
        ended
    }

    fn stop_all(&mut self) {
        // Best effort: the agent is about to exit. What is left is deleted with the agent's
        // pod (ownerReference) or by the next run's orphan cleanup.
        for server in std::mem::take(&mut self.live) {
            let _ = self.order(Order::Delete { server, grace_s: 0 });
        }
    }

    fn terminate_all(&mut self) {
        for server in &self.live {
            let _ = self.order(Order::Delete { server: server.clone(), grace_s: self.grace_s });
        }
    }

    fn running(&self) -> usize {
        self.live.len()
    }

    fn set_hosting(&mut self, name: &str, hosting: bool) {
        if self.live.contains(name) {
            // Best effort: a label for operators and autoscalers, never a decision.
            let _ = self.order(Order::Pool { server: name.to_owned(), hosting });
        }
    }

    fn ready(&self, name: &str) -> bool {
        let key = ObjectRef::new(&pod::pod_name(name, &self.run)).within(&self.namespace);
        self.pods.get(&key).is_some_and(|p| fate(&p) == Fate::Running { ready: true })
    }
}

/// A kube client for `config`. kube builds its TLS configuration with rustls' process-wide
/// crypto provider. With ring the only one compiled in, rustls picks it by itself; were another
/// dependency to compile aws-lc-rs in too, rustls could not choose and would panic, so ring's is
/// installed first unless one is (the rest of Horizon passes ring explicitly).
pub fn client(config: kube::Config) -> Result<kube::Client, KubeError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Only fails if another thread installed one meanwhile: then that one serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    kube::Client::try_from(config).map_err(|e| KubeError::Client(e.to_string()))
}

fn url_config(url: &str, namespace: &str) -> Result<kube::Config, KubeError> {
    let uri = url
        .parse::<http::Uri>()
        .map_err(|e| KubeError::Url { url: url.to_owned(), why: e.to_string() })?;
    let mut config = kube::Config::new(uri);
    config.default_namespace = namespace.to_owned();
    Ok(config)
}

/// Reports `server` ended, once.
fn report(
    ended: &mpsc::UnboundedSender<(String, String)>,
    reported: &Mutex<HashSet<String>>,
    server: &str,
    why: String,
) {
    let first = reported.lock().map(|mut r| r.insert(server.to_owned())).unwrap_or(true);
    if first {
        let _ = ended.send((server.to_owned(), why));
    }
}

/// The watcher task: pods of this run, as they change.
async fn watch_pods(
    stream: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    ended: mpsc::UnboundedSender<(String, String)>,
    reported: Arc<Mutex<HashSet<String>>>,
    site: String,
) {
    let mut stream = std::pin::pin!(stream);
    // The servers seen alive, and those seen again during a re-list.
    let mut alive: HashSet<String> = HashSet::new();
    let mut relisted: HashSet<String> = HashSet::new();
    let mut failing = false;
    while let Some(event) = stream.next().await {
        let pod = match event {
            Ok(watcher::Event::Init) => {
                relisted.clear();
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                // Deleted while the watch was down (or compacted away): gone all the same.
                for server in alive.difference(&relisted) {
                    report(&ended, &reported, server, "pod gone (not in the re-list)".into());
                }
                alive = std::mem::take(&mut relisted);
                continue;
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(server) = server_of(&pod) {
                    alive.remove(server);
                    report(&ended, &reported, server, "pod deleted".into());
                    // Gone for good: nothing more comes for it (names are never reused).
                    if let Ok(mut r) = reported.lock() {
                        r.remove(server);
                    }
                }
                continue;
            }
            Ok(watcher::Event::InitApply(pod)) => {
                if let Some(server) = server_of(&pod) {
                    relisted.insert(server.to_owned());
                }
                pod
            }
            Ok(watcher::Event::Apply(pod)) => pod,
            Err(e) => {
                // The watcher lists and watches again by itself (with backoff); say it once.
                if !failing {
                    tracing::warn!(%site, error = %e, "watching game-server pods failed; retrying");
                }
                failing = true;
                continue;
            }
        };
        if failing {
            tracing::info!(%site, "watching game-server pods again");
            failing = false;
        }
        let Some(server) = server_of(&pod) else { continue };
        alive.insert(server.to_owned());
        if let Fate::Ended(why) = fate(&pod) {
            report(&ended, &reported, server, why);
        }
    }
}

/// The writer task: orphans first, then each order in turn.
async fn write_pods(
    api: Api<Pod>,
    opts: KubeOptions,
    run: String,
    mut orders: mpsc::Receiver<Order>,
    ended: mpsc::UnboundedSender<(String, String)>,
) {
    let mut backoff = Duration::ZERO;
    delete_orphans(&api, &opts, &run, &mut backoff).await;
    while let Some(order) = orders.recv().await {
        if !backoff.is_zero() {
            tokio::time::sleep(backoff).await;
        }
        match order {
            Order::Create { server, agent, token } => {
                let pod = pod::server_pod(&opts, &run, &server, &agent, &token);
                let name = pod::pod_name(&server, &run);
                match call(api.create(&PostParams::default(), &pod)).await {
                    Ok(_) => {
                        backoff = Duration::ZERO;
                        tracing::info!(site = %opts.site, %server, pod = %name, "game-server pod created");
                    }
                    Err(why) => {
                        backoff = next(backoff);
                        tracing::warn!(site = %opts.site, %server, %why, "game-server pod not created");
                        let _ = ended.send((server.clone(), format!("pod not created: {why}")));
                        // A call that timed out may have created it after all.
                        if why.starts_with("no answer") {
                            let _ = delete(&api, &name, 0).await;
                        }
                    }
                }
            }
            Order::Pool { server, hosting } => {
                let name = pod::pod_name(&server, &run);
                let patch = Patch::Merge(pod::pool_patch(hosting));
                match call(api.patch(&name, &PatchParams::default(), &patch)).await {
                    Ok(_) => backoff = Duration::ZERO,
                    Err(why) if why.starts_with("404") => {}
                    Err(why) => {
                        backoff = next(backoff);
                        tracing::warn!(site = %opts.site, pod = %name, %why, "pool label not set");
                    }
                }
            }
            Order::Delete { server, grace_s } => {
                let name = pod::pod_name(&server, &run);
                for attempt in 1..=DELETE_TRIES {
                    match delete(&api, &name, grace_s).await {
                        Ok(()) => {
                            backoff = Duration::ZERO;
                            break;
                        }
                        Err(why) => {
                            backoff = next(backoff);
                            tracing::warn!(site = %opts.site, pod = %name, attempt, %why, "game-server pod not deleted");
                            tokio::time::sleep(backoff).await;
                        }
                    }
                }
            }
        }
    }
}

/// Deletes the pods of this site an earlier run left, until the list succeeds once.
async fn delete_orphans(api: &Api<Pod>, opts: &KubeOptions, run: &str, backoff: &mut Duration) {
    let selector = pod::site_selector(&opts.site);
    let list = loop {
        match call(api.list(&ListParams::default().labels(&selector))).await {
            Ok(list) => break list,
            Err(why) => {
                *backoff = next(*backoff);
                tracing::error!(site = %opts.site, namespace = %opts.namespace, %why,
                    "Kubernetes API: cannot list game-server pods; retrying in {backoff:?}");
                tokio::time::sleep(*backoff).await;
            }
        }
    };
    *backoff = Duration::ZERO;
    let orphans = list.items.iter().filter(|p| {
        p.metadata.labels.as_ref().and_then(|l| l.get(pod::RUN_LABEL)).map(String::as_str)
            != Some(run)
    });
    for orphan in orphans {
        let Some(name) = orphan.metadata.name.as_deref() else { continue };
        tracing::info!(site = %opts.site, pod = name, "deleting a game-server pod of an earlier run");
        if let Err(why) = delete(api, name, opts.grace_s).await {
            tracing::warn!(site = %opts.site, pod = name, %why, "orphan pod not deleted");
        }
    }
}

/// Deletes a pod (absent is fine), its dependents in the background.
async fn delete(api: &Api<Pod>, name: &str, grace_s: u32) -> Result<(), String> {
    let params = DeleteParams {
        grace_period_seconds: Some(grace_s),
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match call(api.delete(name, &params)).await {
        Ok(_) => Ok(()),
        Err(why) if why.starts_with("404") => Ok(()),
        Err(why) => Err(why),
    }
}

/// An API call with its deadline; the error says what the API server said (`409 AlreadyExists:
/// …`), or that it did not answer.
async fn call<T>(f: impl Future<Output = kube::Result<T>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(kube::Error::Api(status))) => {
            Err(format!("{} {}: {}", status.code, status.reason, status.message))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}

fn next(backoff: Duration) -> Duration {
    (backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_for_an_https_api_server_builds_its_tls_with_ring() {
        // An in-cluster API server is https: kube's TLS takes the process's crypto provider.
        let config = url_config("https://127.0.0.1:6443", "horizon").unwrap();
        assert!(client(config).is_ok());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        let bad = url_config("not a url", "horizon").unwrap_err();
        assert!(bad.to_string().contains("not a url"), "{bad}");
    }
}
