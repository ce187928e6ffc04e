//! The ownership log in etcd, and the election that decides which core may write it
//! (docs/running.md, "A standby core"; design.md §6, I7).
//!
//! Every replica of the core campaigns on `PREFIX/leader` (etcd's election API, under a lease of
//! `election_ttl_s` kept alive every third of it). The one elected reads the state below, bumps
//! the generation, and serves; the others wait in the campaign, their admin API saying so.
//!
//! | key | value (JSON) |
//! |---|---|
//! | `PREFIX/generation` | the core generation now serving |
//! | `PREFIX/next_player` | the first player id never handed out |
//! | `PREFIX/lease/ID` | region `ID`'s lease: epoch, site, world and box |
//! | `PREFIX/handover/ID` | a handover of `ID` whose freeze was sent: target and epoch |
//! | `PREFIX/backup/ID` | the pointer to `ID`'s latest copy: epoch, tick, sizes (the bytes are files) |
//! | `PREFIX/format` | the layout of these keys ([`FORMAT`]): a build that reads an older one only refuses a newer |
//! | `PREFIX/universe` | the universe's name (`store.universe`, else the core site's): a core of another universe refuses to lead here |
//!
//! **Fencing.** Every write is one transaction, *if the leader key's creation revision is still
//! ours then write*: once a core's election key is gone (its lease expired, or it resigned), it
//! commits nothing, whatever it believes. Keys are never written outside such a transaction.
//!
//! **Self-fencing.** A keep-alive stream can look alive with the network gone, and etcd expires
//! the lease by its own clock. So the keeper counts by this process's monotonic clock
//! ([`LeaseClock`]: the chaos simulator runs the same rule): from the moment it *sent* the last
//! keep-alive that etcd acknowledged, the lease lives at least its remaining TTL; a quarter of
//! the TTL before that runs out without a newer acknowledgement, the keeper raises the
//! [`Fence`]. The core stops granting and renewing at once (it exits, and
//! its supervisor restarts it as a standby), before any standby can have been elected.
//!
//! **Copies** stay files in `[store] path`, not in etcd: a copy is up to megabytes, written
//! every few seconds per region, where etcd wants values well under 1.5 MiB and keeps every
//! revision until compaction. Replicas that share that directory (a ReadWriteMany volume) find
//! every copy the previous leader kept; a replica that does not starts without them, and has
//! every running region's copy again one backup period after the agents reconnect.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KvClient, LeaseKeepAliveStream,
    LeaseKeeper, Txn, TxnOp,
};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Fence, LeaseClock, Record, StoreError, StoreState};
use crate::config::EtcdOptions;

/// How long one etcd request may take before the write fails (the store thread waits on it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The layout of the keys this build writes and reads. A store written in a newer one is
/// refused (its meaning may have changed); an older one is read as it is.
pub const FORMAT: u32 = 1;

/// What the keys say of the store itself, besides the state.
#[derive(Debug, Default, PartialEq)]
struct Meta {
    format: Option<u32>,
    universe: Option<String>,
}

/// This core leads: the state it read, the generation it bumped, its log, and its fence.
#[derive(Debug)]
pub struct Leadership {
    pub state: StoreState,
    pub generation: u32,
    pub log: EtcdLog,
    pub fence: Fence,
    /// The task keeping the election lease alive (aborting it is dying as a crash would: the
    /// lease is left to expire, not revoked).
    pub keeper: tokio::task::AbortHandle,
}

/// The ownership log, written only by the leader (see the module documentation).
pub struct EtcdLog {
    kv: KvClient,
    /// The store thread is no runtime thread: it waits on etcd through this handle.
    rt: tokio::runtime::Handle,
    prefix: String,
    leader_key: Vec<u8>,
    leader_rev: i64,
    fence: Fence,
    /// Names the store in errors: the endpoints and the prefix.
    name: PathBuf,
}

impl std::fmt::Debug for EtcdLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLog")
            .field("store", &self.name)
            .field("leader_rev", &self.leader_rev)
            .finish_non_exhaustive()
    }
}

fn store_name(opts: &EtcdOptions) -> PathBuf {
    PathBuf::from(format!("etcd {} {}", opts.endpoints.join(","), opts.prefix))
}

/// The TLS settings of `[store] tls_*`, their files read now: a file that cannot be read is
/// named.
fn tls_options(tls: &crate::config::EtcdTls) -> Result<etcd_client::TlsOptions, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let mut options = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca)?));
    if let Some((cert, key)) = &tls.identity {
        options = options.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &tls.server_name {
        options = options.domain_name(name.clone());
    }
    Ok(options)
}

/// Campaigns until elected, then reads the state and bumps the generation (in a transaction
/// guarded by the new leadership: no deposed core writes a generation). `value` is what this
/// core advertises while it leads (operators read it with `etcdctl elect -l`); `universe` names
/// the universe it serves (a store holding another's is refused, as is one written in a newer
/// [`FORMAT`]: the core resigns at once); `standing_by` is called with the leader's value while
/// another core leads.
pub async fn lead(
    opts: &EtcdOptions,
    value: String,
    universe: &str,
    mut standing_by: impl FnMut(Option<&str>),
) -> Result<Leadership, StoreError> {
    let name = store_name(opts);
    let fail = |why: String| StoreError { path: name.clone(), why };
    // No timeout for every request: the campaign waits as long as another core leads. Each
    // other request has its own.
    let mut connect =
        ConnectOptions::new().with_connect_timeout(REQUEST_TIMEOUT).with_require_leader(true);
    if let Some(tls) = &opts.tls {
        connect = connect.with_tls(tls_options(tls).map_err(fail)?);
    }
    // Over TLS a refused handshake often reads as a closed connection: say where to look.
    let hint = match &opts.tls {
        Some(_) => {
            " (over TLS: store.tls_ca must be the CA of etcd's certificates, and with etcd's --client-cert-auth, store.tls_cert and store.tls_key a certificate it trusts)"
        }
        None => "",
    };
    let mut client = Client::connect(&opts.endpoints, Some(connect))
        .await
        .map_err(|e| fail(format!("cannot connect: {e}{hint}")))?;
    let ttl = Duration::from_secs(u64::from(opts.election_ttl_s));
    let granted_at = Instant::now();
    let grant = client.lease_grant(i64::from(opts.election_ttl_s), None);
    let lease = tokio::time::timeout(REQUEST_TIMEOUT, grant)
        .await
        .map_err(|_| fail(format!("no election lease granted in time{hint}")))?
        .map_err(|e| fail(format!("cannot be granted an election lease: {e}{hint}")))?
        .id();
    let (raise, mut fence) = Fence::new();
    let keeper = tokio::spawn(keep(client.clone(), lease, ttl, granted_at, raise)).abort_handle();
    let election = format!("{}/leader", opts.prefix);
    let leader = tokio::time::timeout(REQUEST_TIMEOUT, client.leader(election.as_str())).await;
    if let Ok(Ok(now)) = leader {
        let value = now.kv().map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
        standing_by(value.as_deref());
    } else {
        standing_by(None);
    }
    let campaign = client.campaign(election.as_str(), value, lease);
    let elected = tokio::select! {
        elected = campaign => elected.map_err(|e| fail(format!("campaign failed: {e}")))?,
        why = fence.raised() => return Err(fail(format!("lost the election lease while standing by: {why}"))),
    };
    let key = elected.leader().ok_or_else(|| fail("elected without a leader key".into()))?;
    let mut log = EtcdLog {
        kv: client.kv_client(),
        rt: tokio::runtime::Handle::current(),
        prefix: opts.prefix.clone(),
        leader_key: key.key().to_vec(),
        leader_rev: key.rev(),
        fence: fence.clone(),
        name: name.clone(),
    };
    let (state, meta) = log.load().await?;
    if let Some(format) = meta.format.filter(|f| *f > FORMAT) {
        return Err(fail(format!(
            "written by a newer Horizon (key layout {format}; this build reads up to {FORMAT}): run that build, or give this one its own store.prefix"
        )));
    }
    if let Some(there) = meta.universe.as_deref().filter(|u| *u != universe) {
        return Err(fail(format!(
            "holds the universe {there:?}, and this core serves {universe:?}: give each universe its own store.prefix (or set store.universe if this is the same one renamed)"
        )));
    }
    let generation = state.generation + 1;
    let record = Record::Generation { generation };
    let mut ops = changes(&log.prefix, &state, &record);
    if meta.format != Some(FORMAT) {
        ops.push(TxnOp::put(format!("{}/format", log.prefix), json(&FORMAT), None));
    }
    if meta.universe.is_none() {
        ops.push(TxnOp::put(format!("{}/universe", log.prefix), json(&universe), None));
    }
    log.commit(ops).await?;
    let mut state = state;
    state.apply(&record);
    Ok(Leadership { state, generation, log, fence, keeper })
}

impl EtcdLog {
    /// Writes `record` (whose effect on `state` is what changes), guarded by the leadership.
    /// Called on the store thread (never on a runtime thread: it waits on etcd).
    pub fn append(&mut self, state: &StoreState, record: &Record) -> Result<(), StoreError> {
        let ops = changes(&self.prefix, state, record);
        if ops.is_empty() {
            return Ok(());
        }
        let rt = self.rt.clone();
        rt.block_on(self.commit(ops))
    }

    fn fail(&self, why: String) -> StoreError {
        StoreError { path: self.name.clone(), why }
    }

    async fn commit(&mut self, ops: Vec<TxnOp>) -> Result<(), StoreError> {
        if let Some(why) = self.fence.reason() {
            return Err(self.fail(format!("fenced, writing nothing: {why}")));
        }
        let guard =
            Compare::create_revision(self.leader_key.clone(), CompareOp::Equal, self.leader_rev);
        let txn = Txn::new().when([guard]).and_then(ops);
        let reply = tokio::time::timeout(REQUEST_TIMEOUT, self.kv.txn(txn)).await;
        match reply {
            Ok(Ok(r)) if r.succeeded() => Ok(()),
            Ok(Ok(_)) => Err(self.fail(
                "deposed: this core's election key is gone, so it commits nothing (another core may lead)"
                    .to_owned(),
            )),
            Ok(Err(e)) => Err(self.fail(format!("write failed: {e}"))),
            Err(_) => Err(self.fail(format!(
                "write not answered within {} s",
                REQUEST_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Everything under the prefix, as the state it stands for.
    async fn load(&mut self) -> Result<(StoreState, Meta), StoreError> {
        let from = format!("{}/", self.prefix);
        let got = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.kv.get(from.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await
        .map_err(|_| self.fail("reading the state timed out".into()))?
        .map_err(|e| self.fail(format!("cannot read the state: {e}")))?;
        let pairs = got.kvs().iter().map(|kv| {
            let key = String::from_utf8_lossy(kv.key());
            (key.strip_prefix(&from).unwrap_or(&key).to_owned(), kv.value().to_vec())
        });
        read_state(pairs).map_err(|why| self.fail(why))
    }
}

/// The keys a record changes, as etcd operations under `prefix`: what `record` makes of the
/// entries it touches in `state` (a put), or their removal (a delete).
fn changes(prefix: &str, state: &StoreState, record: &Record) -> Vec<TxnOp> {
    key_changes(state, record)
        .into_iter()
        .map(|(key, value)| {
            let key = format!("{prefix}/{key}");
            match value {
                Some(value) => TxnOp::put(key, value, None),
                None => TxnOp::delete(key, None),
            }
        })
        .collect()
}

/// The region a record is about, if any.
fn region_of(record: &Record) -> Option<u64> {
    match record {
        Record::Lease { bubble, .. }
        | Record::Gone { bubble }
        | Record::Backup { bubble, .. }
        | Record::BackupPart { bubble, .. }
        | Record::Handover { bubble, .. } => Some(*bubble),
        Record::Generation { .. } | Record::PlayerIds { .. } => None,
    }
}

/// The keys (under the prefix) a record changes and their new values (`None`: deleted).
fn key_changes(state: &StoreState, record: &Record) -> Vec<(String, Option<Vec<u8>>)> {
    let mut next = StoreState {
        generation: state.generation,
        next_player: state.next_player,
        ..StoreState::default()
    };
    let region = region_of(record);
    if let Some(id) = region {
        if let Some(l) = state.leases.get(&id) {
            next.leases.insert(id, l.clone());
        }
        if let Some(h) = state.handovers.get(&id) {
            next.handovers.insert(id, h.clone());
        }
        if let Some(b) = state.backups.get(&id) {
            next.backups.insert(id, b.clone());
        }
    }
    next.apply(record);
    let mut out = Vec::new();
    if next.generation != state.generation {
        out.push(("generation".to_owned(), Some(json(&next.generation))));
    }
    if next.next_player != state.next_player {
        out.push(("next_player".to_owned(), Some(json(&next.next_player))));
    }
    if let Some(id) = region {
        let (before, after) = (state.leases.get(&id), next.leases.get(&id));
        if before != after {
            out.push((format!("lease/{id}"), after.map(json)));
        }
        let (before, after) = (state.handovers.get(&id), next.handovers.get(&id));
        if before != after {
            out.push((format!("handover/{id}"), after.map(json)));
        }
        let (before, after) = (state.backups.get(&id), next.backups.get(&id));
        if before != after {
            out.push((format!("backup/{id}"), after.map(json)));
        }
    }
    out
}

/// The state the keys under the prefix stand for (the election's keys left out), and what they
/// say of the store. An unknown key is skipped with a warning (a newer build's); a value that
/// does not parse is an error.
fn read_state(
    pairs: impl Iterator<Item = (String, Vec<u8>)>,
) -> Result<(StoreState, Meta), String> {
    let mut state = StoreState::default();
    let mut meta = Meta::default();
    for (key, value) in pairs {
        let bad = |e: serde_json::Error| format!("key {key:?}: {e}");
        let id = |rest: &str| rest.parse::<u64>().map_err(|e| format!("key {key:?}: {e}"));
        match key.split_once('/') {
            _ if key == "generation" => {
                state.generation = serde_json::from_slice(&value).map_err(bad)?
            }
            _ if key == "next_player" => {
                state.next_player = serde_json::from_slice(&value).map_err(bad)?;
            }
            _ if key == "format" => {
                meta.format = Some(serde_json::from_slice(&value).map_err(bad)?)
            }
            _ if key == "universe" => {
                meta.universe = Some(serde_json::from_slice(&value).map_err(bad)?);
            }
            Some(("leader", _)) => {}
            Some(("lease", rest)) => {
                state.leases.insert(id(rest)?, serde_json::from_slice(&value).map_err(bad)?);
            }
            Some(("handover", rest)) => {
                state.handovers.insert(id(rest)?, serde_json::from_slice(&value).map_err(bad)?);
            }
            Some(("backup", rest)) => {
                state.backups.insert(id(rest)?, serde_json::from_slice(&value).map_err(bad)?);
            }
            _ => tracing::warn!(key, "unknown key under the store's prefix: skipped"),
        }
    }
    Ok((state, meta))
}

/// JSON bytes of a stored value (plain data: it always serialises).
fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Keeps the election lease alive, and raises the fence by this process's own clock (see the
/// module documentation). Ends when the fence is raised, or when every [`Fence`] is dropped
/// (the core stopped): then it revokes the lease, so that a standby takes over at once.
async fn keep(
    mut client: Client,
    lease: i64,
    ttl: Duration,
    granted_at: Instant,
    raise: watch::Sender<Option<String>>,
) {
    let since = |t: Instant| t.saturating_duration_since(granted_at);
    let mut clock = LeaseClock::granted(ttl, Duration::ZERO);
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    loop {
        let sent = Instant::now();
        let round = async {
            if stream.is_none() {
                stream = Some(client.lease_keep_alive(lease).await?);
            }
            let Some((keeper, replies)) = stream.as_mut() else { return Ok(None) };
            keeper.keep_alive().await?;
            replies.message().await
        };
        let deadline = granted_at + clock.deadline();
        let stopped = raise.closed();
        let outcome = tokio::select! {
            outcome = tokio::time::timeout_at(deadline, round) => outcome,
            () = stopped => {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, client.lease_revoke(lease)).await;
                return;
            }
        };
        match outcome {
            Ok(Ok(Some(reply))) if reply.ttl() > 0 => {
                clock.acked(since(sent), Duration::from_secs(reply.ttl() as u64));
            }
            Ok(Ok(Some(_))) => {
                raise.send_replace(Some("etcd says the election lease has expired".to_owned()));
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                // The stream broke: open another, until the deadline.
                stream = None;
                let retry = Instant::now() + ttl / 12;
                tokio::time::sleep_until(retry.min(granted_at + clock.deadline())).await;
                continue;
            }
            Err(_) => {
                let why = format!(
                    "no keep-alive acknowledged by etcd in time: the election lease ({} s) may \
                     expire before another could be, so this core stops leading now",
                    ttl.as_secs()
                );
                raise.send_replace(Some(why));
                let _ = tokio::time::timeout(ttl / 3, client.lease_revoke(lease)).await;
                return;
            }
        }
        let next = granted_at + clock.next_keep_alive(since(sent));
        tokio::time::sleep_until(next.min(granted_at + clock.deadline())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoredRegion;

    /// Records whose key changes, written to a map of keys and read back, give the state that
    /// applying them gives: what a standby reads is what the leader held.
    #[test]
    fn the_keys_a_record_changes_read_back_as_the_state_it_makes() {
        let region = Some(StoredRegion { world: 1, min: [0.0; 3], max: [10.0; 3] });
        let records = vec![
            Record::Generation { generation: 3 },
            Record::PlayerIds { next: 4096 },
            Record::Lease { bubble: 7, epoch: 12, site: "MTL".into(), region },
            Record::Handover { bubble: 7, epoch: 13, site: "HKG".into() },
            Record::Backup { bubble: 7, epoch: 12, tick: 40, bytes: 900 },
            Record::Lease { bubble: 7, epoch: 13, site: "HKG".into(), region },
            Record::Lease { bubble: 9, epoch: 13, site: "PAR".into(), region: None },
            Record::BackupPart { bubble: 9, epoch: 13, part: 1, parts: 2, tick: 5, bytes: 10 },
            Record::BackupPart { bubble: 9, epoch: 13, part: 0, parts: 2, tick: 6, bytes: 20 },
            Record::Gone { bubble: 7 },
            Record::Generation { generation: 4 },
        ];
        let mut applied = StoreState::default();
        let mut keys = std::collections::BTreeMap::new();
        for r in &records {
            for (key, value) in key_changes(&applied, r) {
                match value {
                    Some(v) => keys.insert(key, v),
                    None => keys.remove(&key),
                };
            }
            applied.apply(r);
            let (read, meta) = read_state(keys.clone().into_iter()).unwrap();
            assert_eq!(read, applied, "after {r:?}");
            assert_eq!(meta, Meta::default());
        }
        assert!(!keys.contains_key("lease/7") && keys.contains_key("backup/7"), "{keys:?}");
        assert_eq!(applied.generation, 4);
    }

    #[test]
    fn a_value_that_does_not_parse_is_an_error_naming_its_key() {
        let pairs = vec![("lease/3".to_owned(), b"{".to_vec())];
        let err = read_state(pairs.into_iter()).unwrap_err();
        assert!(err.starts_with("key \"lease/3\": "), "{err}");
        let odd = vec![("elsewhere".to_owned(), b"1".to_vec()), ("leader/x".to_owned(), vec![])];
        assert_eq!(read_state(odd.into_iter()).unwrap(), (StoreState::default(), Meta::default()));
    }

    #[test]
    fn the_store_says_its_key_layout_and_universe() {
        let pairs = vec![
            ("format".to_owned(), b"2".to_vec()),
            ("universe".to_owned(), b"\"prod-eu\"".to_vec()),
        ];
        let (_, meta) = read_state(pairs.into_iter()).unwrap();
        assert_eq!(meta, Meta { format: Some(2), universe: Some("prod-eu".into()) });
    }
}
