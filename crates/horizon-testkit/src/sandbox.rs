//! Core + agents + game servers + emulated WAN, on loopback: started here, read through its
//! accessors; faults a drill or test injects in `faults.rs`, the game-server processes in
//! `processes.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use horizon_agent::{AgentConfig, AgentHandle, ProcessDriver, ProcessOptions, ServerDriver};
use horizon_core::{CoreConfig, CoreHandle, Stage};
use horizon_mesh::{SiteName, Sites, Thresholds};
use horizon_transport::netem::{Netem, NetemConfig};
use horizon_transport::tls::DevCa;

use crate::ReservedPort;
use crate::ports::until_free;

use crate::TcpCut;

mod faults;
mod processes;

/// Why a sandbox could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    Setup(String),
}

fn setup(what: &str) -> impl Fn(&dyn std::fmt::Display) -> SandboxError + '_ {
    move |e| SandboxError::Setup(format!("{what}: {e}"))
}

/// What to run.
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    /// Sites in order; the first is the core site.
    pub sites: Vec<String>,
    /// Backbone RTT per unordered pair, `"PAR-MTL"`.
    pub backbone_ms: BTreeMap<String, f64>,
    /// Where sites are, `[latitude, longitude]` (`[sites.coordinates]`): the core checks
    /// measured round trips against their physical floors.
    pub coordinates: BTreeMap<String, [f64; 2]>,
    /// RTT between players and their home agent.
    pub access_ms: f64,
    pub thresholds: Thresholds,
    /// The core's rollout stage (`[placement] stage`).
    pub stage: Stage,
    /// Under [`Stage::Fixed`]: each delegation's world, box (`None`: the whole world) and site.
    pub delegations: Vec<(u32, Option<horizon_mesh::Aabb>, String)>,
    pub warm_pool: usize,
    /// Players a game server takes regions up to (several bubbles share a server).
    pub seats_per_server: u32,
    pub server_tick_ms: u32,
    /// The program every game server runs: the `horizon` binary.
    pub server_program: PathBuf,
    /// Its first arguments: `gameserver` (the Rust reference game), `godot-server --project
    /// DIR` (the GDScript one on Godot), or `godot-adapter --project DIR` (today's servers).
    pub server_args: Vec<String>,
    /// Working directory (certificates, store). Created if missing.
    pub dir: PathBuf,
    /// Where the core's admin API listens (`127.0.0.1:0` picks a port).
    pub admin: SocketAddr,
    /// Makes each agent's driver from what its game servers are started with; `None`: the
    /// process driver.
    pub drivers: Option<DriverFactory>,
    /// A second core standing by, both on this etcd ([`Sandbox::kill_leader`],
    /// [`Sandbox::cut_leader_from_store`], [`Sandbox::standby_leads`],
    /// [`Sandbox::restart_standby`]); `None`: one core on the file store. The two share the
    /// copies' directory (as replicas on a ReadWriteMany volume would). Each reaches every etcd
    /// member through a [`TcpCut`] of its own, so that either can be cut from the store.
    pub standby: Option<horizon_core::EtcdOptions>,
}

/// Makes an agent's [`ServerDriver`] (`horizon demo --driver kube`: pods of a fake API server).
#[derive(Clone)]
pub struct DriverFactory(pub Arc<MakeDriver>);

/// What a [`DriverFactory`] calls, once per agent.
pub type MakeDriver =
    dyn Fn(&ProcessOptions) -> Result<Box<dyn ServerDriver>, String> + Send + Sync;

impl std::fmt::Debug for DriverFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DriverFactory(..)")
    }
}

impl SandboxOptions {
    /// PAR (core), MTL and HKG with the default backbone RTTs (design.md §2) and 10 ms access.
    pub fn three_sites(server_program: PathBuf, dir: PathBuf) -> Self {
        let backbone_ms = [("PAR-MTL", 85.0), ("PAR-HKG", 185.0), ("MTL-HKG", 225.0)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let coordinates =
            [("PAR", [48.86, 2.35]), ("MTL", [45.50, -73.57]), ("HKG", [22.32, 114.17])]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        SandboxOptions {
            sites: vec!["PAR".into(), "MTL".into(), "HKG".into()],
            backbone_ms,
            coordinates,
            access_ms: 10.0,
            thresholds: Thresholds::default(),
            stage: Stage::Dynamic,
            delegations: Vec::new(),
            warm_pool: 2,
            seats_per_server: 60,
            server_tick_ms: 33,
            server_program,
            server_args: vec!["gameserver".into()],
            dir,
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            drivers: None,
            standby: None,
        }
    }

    fn rtt(&self, a: &str, b: &str) -> f64 {
        self.backbone_ms
            .get(&format!("{a}-{b}"))
            .or_else(|| self.backbone_ms.get(&format!("{b}-{a}")))
            .copied()
            .unwrap_or(0.0)
    }
}

/// A running mesh.
#[derive(Debug)]
pub struct Sandbox {
    pub core: CoreHandle,
    pub agents: Vec<AgentHandle>,
    /// Where players of each site connect (through the access link).
    pub gateways: BTreeMap<String, SocketAddr>,
    /// Each site's probe beacon (UDP, direct: no emulated access link in front of it).
    pub beacons: BTreeMap<String, SocketAddr>,
    pub ca: PathBuf,
    /// Signs players' tokens (the mesh's player keys, as the studio's auth service holds them).
    pub player_tokens: crate::bots::PlayerTokens,
    netems: Vec<Netem>,
    /// The RTT between players and their home agent.
    access_ms: f64,
    /// Index in `netems` of the transfer link between two sites (names in sorted order).
    transfer_links: BTreeMap<(String, String), usize>,
    /// Relay site → indices of the emulators between its agent and the core (each core's,
    /// with a standby).
    core_links: BTreeMap<String, Vec<usize>>,
    /// What the core runs with (its ports fixed), to start it again.
    core_config: CoreConfig,
    /// What each site's agent runs with (its ports fixed), to start it again.
    agent_setups: BTreeMap<String, (AgentConfig, ProcessOptions)>,
    drivers: Option<DriverFactory>,
    /// The figures of agents killed by [`Sandbox::restart_agent`].
    retired: Vec<(String, Arc<horizon_agent::AgentStats>)>,
    /// With a standby ([`SandboxOptions::standby`]): the two cores, the first led at the start.
    cores: Vec<CoreSlot>,
    /// Which of `cores` leads (`core` is its handle).
    leader: usize,
    /// The core standing by (its index in `cores`), campaigning.
    standby: Option<(usize, StandingBy)>,
    /// The ports the core(s) and agents listen on, kept from every other reservation while
    /// the sandbox lives (a daemon restarted, or a standby elected, binds its own again).
    _reserved: Vec<ReservedPort>,
}

/// One of the two cores of a sandbox with a standby.
#[derive(Debug)]
struct CoreSlot {
    /// What it runs with: its ports fixed, its etcd endpoints through `store_cuts`.
    config: CoreConfig,
    /// Indices in `netems` of every agent's link to it (even the core site's agent reaches it
    /// through an emulator, so that its death can be silent).
    links: Vec<usize>,
    /// Its links to each etcd member.
    store_cuts: Vec<TcpCut>,
}

/// A core campaigning to lead: its `start` resolves once elected.
type StandingBy = tokio::task::JoinHandle<Result<CoreHandle, horizon_core::CoreError>>;

/// A loopback port for a daemon that may bind it again later (a restart, a standby elected),
/// held in `held` for the sandbox's life: see [`ReservedPort`].
fn reserve(held: &mut Vec<ReservedPort>) -> Result<SocketAddr, SandboxError> {
    let port = ReservedPort::new().map_err(|e| setup("a reserved port")(&e))?;
    let addr = port.addr();
    held.push(port);
    Ok(addr)
}

/// A forwarder that can be cut in front of every endpoint of `etcd`, and the options that
/// reach etcd through them.
async fn store_cuts(
    etcd: &horizon_core::EtcdOptions,
) -> Result<(horizon_core::EtcdOptions, Vec<TcpCut>), SandboxError> {
    let mut cuts = Vec::new();
    let mut endpoints = Vec::new();
    for endpoint in &etcd.endpoints {
        let addr: SocketAddr = endpoint
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| setup(&format!("etcd endpoint {endpoint}"))(&e))?;
        let cut = TcpCut::start(addr).await.map_err(|e| setup("a store link")(&e))?;
        endpoints.push(format!("http://{}", cut.local_addr()));
        cuts.push(cut);
    }
    Ok((horizon_core::EtcdOptions { endpoints, ..etcd.clone() }, cuts))
}

const LOCALHOST: [u8; 4] = [127, 0, 0, 1];

fn make_driver(
    drivers: Option<&DriverFactory>,
    process: &ProcessOptions,
) -> Result<Box<dyn ServerDriver>, SandboxError> {
    match drivers {
        Some(factory) => (factory.0)(process).map_err(|e| setup("driver")(&e)),
        None => Ok(Box::new(ProcessDriver::new(process.clone()))),
    }
}

/// A user-space emulator on loopback in front of `upstream`, adding `rtt_ms` of round trip.
async fn emulate(upstream: SocketAddr, rtt_ms: f64) -> Result<Netem, SandboxError> {
    let delay = Duration::from_secs_f64(rtt_ms / 1000.0);
    let config = NetemConfig::new(SocketAddr::from((LOCALHOST, 0)), upstream, delay);
    Netem::start(config).await.map_err(|e| setup("netem")(&e))
}

fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b { (a.to_owned(), b.to_owned()) } else { (b.to_owned(), a.to_owned()) }
}

impl Sandbox {
    pub async fn start(opts: SandboxOptions) -> Result<Sandbox, SandboxError> {
        let certs = opts.dir.join("certs");
        let ca = DevCa::new(&certs);
        let names: Vec<&str> = opts.sites.iter().map(String::as_str).collect();
        ca.create(&names, true).map_err(|e| setup("certificates")(&e))?;
        let core_site =
            opts.sites.first().ok_or_else(|| SandboxError::Setup("no sites".into()))?.clone();
        let site_names: Vec<SiteName> =
            names.iter().filter_map(|n| SiteName::new(n).ok()).collect();
        let pairs: Vec<(SiteName, SiteName, f64)> = site_names
            .iter()
            .enumerate()
            .flat_map(|(i, a)| site_names[i + 1..].iter().map(move |b| (a.clone(), b.clone())))
            .map(|(a, b)| {
                let ms = opts.rtt(a.as_str(), b.as_str());
                (a, b, ms)
            })
            .collect();
        let core_name = SiteName::new(&core_site).map_err(|e| setup("core site")(&e))?;
        let places: Vec<(SiteName, horizon_mesh::Place)> = opts
            .coordinates
            .iter()
            .filter_map(|(site, &[lat, lon])| {
                Some((SiteName::new(site).ok()?, horizon_mesh::Place { lat, lon }))
            })
            .collect();
        let sites = Sites::placed(site_names.clone(), &core_name, &pairs, &places)
            .map_err(|e| SandboxError::Setup(format!("sites: {e:?}")))?;
        let mut delegations = Vec::new();
        for (world, bounds, site) in &opts.delegations {
            let site = sites
                .id(site)
                .ok_or_else(|| SandboxError::Setup(format!("delegation to unknown site {site}")))?;
            delegations.push(horizon_mesh::Delegation {
                world: horizon_mesh::WorldId(*world),
                bounds: *bounds,
                site,
            });
        }
        // Every port a core or agent listens on is reserved: it is bound again after a restart.
        let mut reserved = Vec::new();
        let listen_admin =
            if opts.admin.port() == 0 { reserve(&mut reserved)? } else { opts.admin };
        let mut core_config = CoreConfig {
            sites,
            thresholds: opts.thresholds.clone(),
            listen_control: reserve(&mut reserved)?,
            listen_admin,
            // Agents reach each core through an emulator of their own: no redirect.
            advertise_control: None,
            ca: ca.ca_cert(),
            cert: ca.core_cert(),
            key: ca.core_key(),
            store: opts.dir.join("store"),
            store_kind: horizon_core::StoreKind::File,
            zones: Vec::new(),
            stage: opts.stage,
            delegations,
        };
        let mut cores = Vec::new();
        if let Some(etcd) = &opts.standby {
            let (through, cuts) = store_cuts(etcd).await?;
            core_config.store_kind = horizon_core::StoreKind::Etcd(through);
            cores.push(CoreSlot {
                config: core_config.clone(),
                links: Vec::new(),
                store_cuts: cuts,
            });
        }
        let core = horizon_core::start(core_config.clone()).await.map_err(|e| setup("core")(&e))?;
        // A restarted core comes back on the same ports.
        core_config.listen_control = core.control_addr;
        core_config.listen_admin = core.admin_addr;
        let mut netems = Vec::new();
        // The standby binds its control port only once elected: its ports are chosen now.
        let standby = match (&opts.standby, cores.first_mut()) {
            (Some(etcd), Some(first)) => {
                first.config = core_config.clone();
                let (through, cuts) = store_cuts(etcd).await?;
                let mut config = core_config.clone();
                config.store_kind = horizon_core::StoreKind::Etcd(through);
                config.listen_control = reserve(&mut reserved)?;
                config.listen_admin = reserve(&mut reserved)?;
                let control = config.listen_control;
                cores.push(CoreSlot {
                    config: config.clone(),
                    links: Vec::new(),
                    store_cuts: cuts,
                });
                Some((control, tokio::spawn(horizon_core::start(config))))
            }
            _ => None,
        };
        let player_keys = ca.ca_cert().with_file_name("player.keys");
        std::fs::write(&player_keys, horizon_transport::Keyring::generate_file("k1"))
            .map_err(|e| setup("player keys")(&e))?;
        let player_tokens = crate::bots::PlayerTokens(Arc::new(
            horizon_transport::Keyring::load(&player_keys).map_err(|e| setup("player keys")(&e))?,
        ));
        // Agents start in descending name order: a site dials the sites whose names sort after
        // its own, so their (emulated) addresses exist by then.
        let mut order: Vec<&String> = opts.sites.iter().collect();
        order.sort_by(|a, b| b.cmp(a));
        let mut agents: Vec<AgentHandle> = Vec::new();
        let mut transfer: BTreeMap<String, SocketAddr> = BTreeMap::new();
        let mut gateways = BTreeMap::new();
        let mut beacons = BTreeMap::new();
        let mut transfer_links = BTreeMap::new();
        let mut core_links = BTreeMap::new();
        let mut agent_setups = BTreeMap::new();
        for site in order {
            let rtt = if *site == core_site { 0.0 } else { opts.rtt(&core_site, site) };
            let mut core_addrs = Vec::new();
            if cores.is_empty() {
                if *site == core_site {
                    core_addrs.push(core.control_addr.into());
                } else {
                    let n = emulate(core.control_addr, rtt).await?;
                    core_addrs.push(n.local_addr().into());
                    core_links.insert(site.clone(), vec![netems.len()]);
                    netems.push(n);
                }
            }
            for slot in &mut cores {
                let n = emulate(slot.config.listen_control, rtt).await?;
                core_addrs.push(n.local_addr().into());
                if *site != core_site {
                    core_links.entry(site.clone()).or_default().push(netems.len());
                }
                slot.links.push(netems.len());
                netems.push(n);
            }
            let mut peers = BTreeMap::new();
            for (other, addr) in &transfer {
                let n = emulate(*addr, opts.rtt(site, other)).await?;
                peers.insert(other.clone(), n.local_addr().into());
                transfer_links.insert(pair(site, other), netems.len());
                netems.push(n);
            }
            // Its ports are reserved at each attempt to start it, below.
            let any = SocketAddr::from((LOCALHOST, 0));
            let mut cfg = AgentConfig {
                site: site.clone(),
                core: core_addrs,
                core_site: core_site.clone(),
                listen_servers: any,
                listen_players: any,
                listen_transfer: any,
                listen_admin: Some(any),
                listen_beacon: Some(any),
                advertise_admin: None,
                advertise_transfer: String::new(),
                ca: ca.ca_cert(),
                cert: ca.site_cert(site),
                key: ca.site_key(site),
                player_keys: player_keys.clone(),
                warm_pool: opts.warm_pool,
                max_servers: 64,
                seats_per_server: opts.seats_per_server,
                players_per_server: opts.thresholds.players_per_server,
                server_tick_ms: opts.server_tick_ms,
                server_program: opts.server_program.clone(),
                server_args: opts.server_args.clone(),
                driver: horizon_agent::DriverChoice::Process,
                peers,
                report_ms: 1000,
                renew_ms: 5000,
            };
            let process = ProcessOptions {
                program: opts.server_program.clone(),
                args: opts.server_args.clone(),
                site: site.clone(),
                ca: ca.ca_cert(),
                tick_ms: opts.server_tick_ms,
                max_servers: 64,
            };
            let mut attempts = 0;
            let handle = loop {
                cfg.listen_servers = reserve(&mut reserved)?;
                cfg.listen_players = reserve(&mut reserved)?;
                cfg.listen_transfer = reserve(&mut reserved)?;
                cfg.listen_admin = Some(reserve(&mut reserved)?);
                cfg.listen_beacon = Some(reserve(&mut reserved)?);
                let driver = make_driver(opts.drivers.as_ref(), &process)?;
                match horizon_agent::start(cfg.clone(), driver).await {
                    Ok(handle) => break handle,
                    // A port taken between its reservation and the bind (CI's lanes run side by
                    // side; once, an agent's beacon port was): the agent again on fresh ones.
                    Err(e) if attempts < 5 && e.to_string().contains("Address already in use") => {
                        attempts += 1;
                        tracing::warn!(%site, error = %e, "a reserved port was taken: fresh ones");
                    }
                    Err(e) => return Err(setup("agent")(&e)),
                }
            };
            // A restarted agent comes back on the same ports (the emulators point at them).
            let fixed = AgentConfig {
                listen_servers: handle.servers_addr,
                listen_players: handle.players_addr,
                listen_transfer: handle.transfer_addr,
                listen_admin: handle.admin_addr,
                listen_beacon: handle.beacon_addr,
                ..cfg
            };
            agent_setups.insert(site.clone(), (fixed, process));
            transfer.insert(site.clone(), handle.transfer_addr);
            let n = emulate(handle.players_addr, opts.access_ms).await?;
            gateways.insert(site.clone(), n.local_addr());
            beacons.extend(handle.beacon_addr.map(|a| (site.clone(), a)));
            netems.push(n);
            agents.push(handle);
        }
        Ok(Sandbox {
            core,
            agents,
            gateways,
            beacons,
            ca: ca.ca_cert(),
            player_tokens,
            netems,
            access_ms: opts.access_ms,
            transfer_links,
            core_links,
            core_config,
            agent_setups,
            drivers: opts.drivers,
            retired: Vec::new(),
            standby: standby.map(|(_, task)| (1, task)),
            cores,
            leader: 0,
            _reserved: reserved,
        })
    }

    /// Where each core's admin API listens (the leader's first, then the standby's), with a
    /// standby; the one core's otherwise.
    pub fn core_admins(&self) -> Vec<SocketAddr> {
        let mut admins = vec![self.core.admin_addr];
        if let Some((index, _)) = &self.standby {
            admins.extend(self.cores.get(*index).map(|s| s.config.listen_admin));
        }
        admins
    }

    /// Where a player living near `home` reaches `site`: its gateway and its probe beacon, each
    /// `access + backbone(home, site)` away (new emulators in front of them, kept for the
    /// sandbox's life). For the player's own home: the plain gateway, and the beacon behind
    /// the access link. `None` for a site this sandbox does not run.
    pub async fn reach(
        &mut self,
        home: &str,
        site: &str,
    ) -> Result<Option<(SocketAddr, SocketAddr)>, SandboxError> {
        let sites = &self.core_config.sites;
        let (Some(h), Some(s)) = (sites.id(home), sites.id(site)) else { return Ok(None) };
        let (Some(&gateway), Some(&beacon)) = (self.gateways.get(site), self.beacons.get(site))
        else {
            return Ok(None);
        };
        let backbone = if h == s { 0.0 } else { sites.backbone_ms(h, s) };
        let gateway = if backbone > 0.0 {
            let n = emulate(gateway, backbone).await?;
            let a = n.local_addr();
            self.netems.push(n);
            a
        } else {
            gateway
        };
        let n = emulate(beacon, self.access_ms + backbone).await?;
        let beacon = n.local_addr();
        self.netems.push(n);
        Ok(Some((gateway, beacon)))
    }

    /// The live figures of a site's agent.
    pub fn agent_stats(&self, site: &str) -> Option<&horizon_agent::AgentStats> {
        self.agents.iter().find(|a| a.site == site).map(|a| &*a.stats)
    }

    /// The figures of every agent that ran: those running and those restarted since.
    pub fn every_agent_stats(&self) -> impl Iterator<Item = &horizon_agent::AgentStats> {
        self.every_agent_site_stats().map(|(_, s)| s)
    }

    /// [`Sandbox::every_agent_stats`], each with its agent's site.
    pub fn every_agent_site_stats(
        &self,
    ) -> impl Iterator<Item = (&str, &horizon_agent::AgentStats)> {
        let running = self.agents.iter().map(|a| (a.site.as_str(), &*a.stats));
        running.chain(self.retired.iter().map(|(site, s)| (site.as_str(), &**s)))
    }

    /// The freezes every agent's gateway timed when its players' bubbles moved (`crossings`:
    /// when they changed bubble instead).
    pub fn freezes(&self, crossings: bool) -> Vec<horizon_agent::FreezeSample> {
        self.freezes_by_home(crossings).into_iter().map(|(_, f)| f).collect()
    }

    /// [`Sandbox::freezes`], each with the site of the gateway that timed it: its players' home.
    pub fn freezes_by_home(&self, crossings: bool) -> Vec<(String, horizon_agent::FreezeSample)> {
        let mut all = Vec::new();
        for (site, a) in self.every_agent_site_stats() {
            let samples = if crossings { &a.crossing_freezes } else { &a.freezes };
            let samples = samples.lock().map(|f| f.clone()).unwrap_or_default();
            all.extend(samples.into_iter().map(|f| (site.to_owned(), f)));
        }
        all
    }

    /// The sites, core first.
    /// The core's configuration, as it runs now.
    pub fn core_config(&self) -> &CoreConfig {
        &self.core_config
    }

    pub fn core_site(&self) -> &str {
        self.core_config.sites.name(self.core_config.sites.core()).as_str()
    }

    /// Waits until every site has `ready` servers holding nothing (or the timeout).
    pub async fn wait_ready(&self, ready: u64, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let status = self.core.status().await.unwrap_or_default();
            let ok = !status.sites.is_empty()
                && status.sites.iter().all(|s| {
                    s.agent_connected
                        && s.servers
                            .as_ref()
                            .is_some_and(|v| v.iter().filter(|x| x.ready).count() as u64 >= ready)
                });
            if ok {
                return true;
            }
            if tokio::time::Instant::now() > until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops everything: agents (and their game servers), emulators, then the core.
    pub async fn shutdown(self) {
        if let Some((_, standby)) = &self.standby {
            standby.abort();
        }
        for agent in self.agents {
            agent.shutdown().await;
        }
        for n in &self.netems {
            n.stop();
        }
        self.core.shutdown().await;
    }
}
