//! The core's admin API (`horizon-admin`, axum): `/livez`, `/readyz` (the core's loop
//! answers), `/metrics` (the registry, rendered without asking the loop), `/status` (paged),
//! `/measure.csv` (stage 1's probe tables), and `/` (the console: regions, why each is where it
//! is, a map, a timeline). Read-only; bind it to an operator network.

use horizon_admin::{BoxFuture, Page, Source};
use tokio::sync::{mpsc, oneshot};

/// What the admin API asks the core's loop.
#[derive(Debug)]
pub(crate) enum AdminQuery {
    /// Answered at once by a loop that serves.
    Ping(oneshot::Sender<()>),
    Status(Page, oneshot::Sender<crate::CoreStatus>),
    /// `/measure.csv`.
    MeasureCsv(oneshot::Sender<String>),
}

/// The core loop as the admin API sees it.
#[derive(Debug)]
pub(crate) struct CoreSource {
    pub(crate) queries: mpsc::Sender<AdminQuery>,
}

impl Source for CoreSource {
    fn ready(&self) -> BoxFuture<Result<(), String>> {
        let queries = self.queries.clone();
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            queries.try_send(AdminQuery::Ping(tx)).map_err(|_| "the core loop is busy or gone")?;
            rx.await.map_err(|_| "the core loop is gone".to_owned())
        })
    }

    fn status(&self, page: Page) -> BoxFuture<Result<serde_json::Value, String>> {
        let queries = self.queries.clone();
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            queries
                .try_send(AdminQuery::Status(page, tx))
                .map_err(|_| "the core loop is busy or gone")?;
            let status = rx.await.map_err(|_| "the core loop is gone".to_owned())?;
            serde_json::to_value(status).map_err(|e| e.to_string())
        })
    }

    fn measure_csv(&self) -> BoxFuture<Result<Option<String>, String>> {
        let queries = self.queries.clone();
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            queries
                .try_send(AdminQuery::MeasureCsv(tx))
                .map_err(|_| "the core loop is busy or gone")?;
            rx.await.map(Some).map_err(|_| "the core loop is gone".to_owned())
        })
    }
}

/// What a core standing by knows of the election.
#[cfg(feature = "etcd")]
#[derive(Clone, Debug, Default)]
pub(crate) enum Standing {
    /// Still reaching etcd: who leads is not known yet.
    #[default]
    Connecting,
    /// Nobody led when asked: this core should be elected at once.
    NobodyLeads,
    /// Another core leads (its advertised value).
    Leads(String),
}

/// The control port of a core standing by, with `listen.advertise_control`: every agent's hello
/// is answered with the leader's control address (`not_leader`), or `not_ready` while nobody is
/// known to lead. (Mutual TLS first: only the mesh's sites learn where the leader is.)
#[cfg(feature = "etcd")]
pub(crate) struct Redirect {
    pub(crate) standing: std::sync::Arc<std::sync::Mutex<Standing>>,
}

#[cfg(feature = "etcd")]
impl horizon_transport::Authenticator for Redirect {
    fn check(
        &self,
        _hello: &horizon_proto::Hello,
        _connection: &quinn::Connection,
    ) -> Result<Option<horizon_proto::Name>, horizon_proto::Fault> {
        let standing = self.standing.lock().map(|s| s.clone()).unwrap_or_default();
        // The election's value is `HOST ADDR`: the leader's advertised control address last.
        // A leader that advertised no address wrote its bound one: a wildcard is nowhere to send
        // an agent.
        let reachable = |addr: &&str| {
            addr.parse::<std::net::SocketAddr>().map_or(true, |a| !a.ip().is_unspecified())
        };
        let leader = match &standing {
            Standing::Leads(value) => value.rsplit(' ').next().filter(reachable),
            Standing::Connecting | Standing::NobodyLeads => None,
        };
        Err(match leader {
            Some(addr) => horizon_proto::Fault::not_leader(addr),
            None => horizon_proto::Fault::new(
                horizon_proto::ErrorCode::NotReady,
                "this core stands by and knows of no leader's address yet",
            ),
        })
    }
}

/// A core standing by for another (`[store] kind = "etcd"`): not ready, and says who leads.
#[cfg(feature = "etcd")]
pub(crate) struct StandbySource {
    pub(crate) standing: std::sync::Arc<std::sync::Mutex<Standing>>,
}

#[cfg(feature = "etcd")]
impl StandbySource {
    fn standing(&self) -> Standing {
        self.standing.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[cfg(feature = "etcd")]
impl Source for StandbySource {
    fn ready(&self) -> BoxFuture<Result<(), String>> {
        let why = match self.standing() {
            Standing::Connecting => "standing by: reaching etcd to learn who leads".to_owned(),
            Standing::NobodyLeads => "standing by: nobody leads, campaigning".to_owned(),
            Standing::Leads(leader) => format!("standing by: the core {leader} leads"),
        };
        Box::pin(async move { Err(why) })
    }

    fn status(&self, _page: Page) -> BoxFuture<Result<serde_json::Value, String>> {
        let leader = match self.standing() {
            Standing::Leads(leader) => Some(leader),
            Standing::Connecting | Standing::NobodyLeads => None,
        };
        let doc = serde_json::json!({ "role": "standby", "leader": leader });
        Box::pin(async move { Ok(doc) })
    }
}

/// The console (docs/operations.md, "The console"): polls `/status` every 2 s and shows the
/// sites, a sortable table of regions, why the selected bubble is where it is, a map per world
/// (regions filled by their site, players outlined by home) and the timeline; an admin token
/// typed in is kept for the browser session and sent as the bearer header.
pub(crate) const PAGE: &str = include_str!("status.html");
