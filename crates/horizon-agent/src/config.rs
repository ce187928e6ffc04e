//! The agent's configuration: one TOML file, parsed once, every problem reported together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use horizon_transport::Target;
use serde::Deserialize;

pub(crate) mod keys;

/// Everything an agent runs with.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This agent's site (`MTL`). Its certificate must name it.
    pub site: String,
    /// The core's control endpoints: `host:port`, each a name resolved at each (re)connection.
    /// One, or a core and its standbys (`core = ["a:7400", "b:7400"]`): the agent dials them in
    /// turn until one answers (a standby binds its control port only once it leads).
    pub core: Vec<Target>,
    /// The site the core runs at, whose zones simulate the players no bubble holds (the first
    /// of the core's `[sites]`). Only named here: the core presents its own certificate,
    /// naming `core.horizon`, whatever its site. The agent's metrics for moves to and from it
    /// exist from the start.
    pub core_site: String,
    pub listen_servers: SocketAddr,
    pub listen_players: SocketAddr,
    pub listen_transfer: SocketAddr,
    /// The admin HTTP API (`/livez`, `/readyz`, `/metrics`, `/status`); none if absent.
    pub listen_admin: Option<SocketAddr>,
    /// Where the probe beacon answers clients' pings (UDP), if anywhere (docs/protocol.md,
    /// "Beacons").
    pub listen_beacon: Option<SocketAddr>,
    /// Where operators reach the admin API (`host:port`), told to the core for its status
    /// page. Default: `listen.admin` unless it is a wildcard address.
    pub advertise_admin: Option<String>,
    /// Where other agents reach this one's transfer endpoint (told to the core).
    pub advertise_transfer: String,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The keys that sign players' tokens (docs/security.md): this agent and the studio's
    /// auth service hold them. Reloaded on SIGHUP and when the file changes.
    pub player_keys: PathBuf,
    /// Ready game servers kept spare, holding nothing.
    pub warm_pool: usize,
    pub max_servers: usize,
    /// Players a game server takes new regions up to (`servers.players_per_server ×
    /// servers.pack_fill_ratio`): several bubbles share a server (docs/running.md).
    pub seats_per_server: u32,
    /// Players a game server simulates at most (`servers.players_per_server`): a server over
    /// it gives whole regions away to another server of the site (docs/running.md).
    pub players_per_server: u32,
    pub server_tick_ms: u32,
    /// The program the process driver runs for each game server: the `horizon` binary by
    /// default, or a studio's own.
    pub server_program: PathBuf,
    /// Its first arguments (`["gameserver"]` by default, `["godot-server", "--project", DIR]`
    /// for Godot); the agent's flags follow them (docs/running.md).
    pub server_args: Vec<String>,
    /// What starts the game servers: local processes, or pods through the Kubernetes API.
    pub driver: DriverChoice,
    /// Transfer addresses of other sites (`host:port`), overriding what the core says.
    pub peers: BTreeMap<String, Target>,
    /// How often the agent reports players, servers and links to the core.
    pub report_ms: u64,
    /// How often leases are renewed (one batched request).
    pub renew_ms: u64,
}

/// What starts this site's game servers (`[servers] driver`).
#[derive(Clone, Debug, PartialEq)]
pub enum DriverChoice {
    /// `horizon gameserver` processes, children of the agent (the default).
    Process,
    /// Pods created from a template through the Kubernetes API (`horizon-kube`).
    Kubernetes(KubernetesConfig),
}

/// `[servers.kubernetes]`: how the Kubernetes driver makes game-server pods. The pod template
/// itself is read and checked by `horizon-kube` (`KubeOptions::from_config`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The namespace the pods live in (the agent's own: RBAC grants it nothing else).
    pub namespace: String,
    /// A `PodTemplateSpec` as JSON (the chart renders it from its values). Relative to this file.
    pub pod_template: PathBuf,
    /// Where the pods reach this agent's game-server endpoint (`host:port`, e.g. the agent
    /// Service's name). Default: `listen.servers`, which only suits a single machine.
    pub agent: Option<String>,
    /// Seconds a pod gets between SIGTERM and SIGKILL when the agent stops it.
    #[serde(default = "default_grace_s")]
    pub grace_s: u32,
    /// The API server's URL. Default: in-cluster (the service account), else `KUBECONFIG`.
    pub api: Option<String>,
}

fn default_grace_s() -> u32 {
    10
}

/// `core`: one address, or a list (a core and its standbys).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawCore {
    One(String),
    Many(Vec<String>),
}

/// The file's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    site: String,
    core: RawCore,
    core_site: String,
    listen: RawListen,
    tls: RawTls,
    #[serde(default)]
    servers: RawServers,
    #[serde(default)]
    peers: BTreeMap<String, String>,
    report_ms: Option<u64>,
    renew_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListen {
    servers: String,
    players: String,
    transfer: String,
    advertise_transfer: Option<String>,
    admin: Option<String>,
    advertise_admin: Option<String>,
    beacon: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    player_keys: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServers {
    program: Option<PathBuf>,
    args: Option<Vec<String>>,
    warm_pool: Option<usize>,
    max: Option<usize>,
    players_per_server: Option<u32>,
    pack_fill_ratio: Option<f64>,
    tick_ms: Option<u32>,
    driver: Option<String>,
    kubernetes: Option<KubernetesConfig>,
}

/// The environment variable a game server finds its token in (never on a command line).
pub const SERVER_TOKEN_ENV: &str = "HORIZON_SERVER_TOKEN";

impl AgentConfig {
    /// Reads and checks `path`. Relative TLS paths are relative to the file. Every problem is
    /// reported, one per line.
    pub fn load(path: &Path) -> Result<AgentConfig, Vec<String>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
        // `HORIZON_CONFIG__…` variables set values over the file's (docs/running.md).
        let text = horizon_admin::overrides::apply(&text, std::env::vars()).map_err(|errors| {
            errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect::<Vec<_>>()
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        AgentConfig::parse(&text, base).map_err(|errors| {
            errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect()
        })
    }

    /// Parses a config text; relative paths are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<AgentConfig, Vec<String>> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut errors = Vec::new();
        let mut target = |key: &str, value: &str| match Target::parse(value) {
            Ok(t) => t,
            Err(e) => {
                errors.push(format!("{key} = {e}"));
                Target::from(SocketAddr::from(([127, 0, 0, 1], 1)))
            }
        };
        let core: Vec<Target> = match &raw.core {
            RawCore::One(a) => vec![target("core", a)],
            RawCore::Many(list) => {
                list.iter().enumerate().map(|(i, a)| target(&format!("core[{i}]"), a)).collect()
            }
        };
        let peers: BTreeMap<String, Target> = raw
            .peers
            .iter()
            .map(|(site, a)| (site.clone(), target(&format!("peers.{site}"), a)))
            .collect();
        if let Some(a) = &raw.listen.advertise_transfer {
            let _ = target("listen.advertise_transfer", a);
        }
        if let Some(a) = &raw.listen.advertise_admin {
            let _ = target("listen.advertise_admin", a);
        }
        if core.is_empty() {
            errors.push("core = []: name at least one address of the core (host:port)".into());
        }
        let mut addr = |key: &str, value: &str| match value.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(e) => {
                errors.push(format!("{key} = {value:?}: not an address (ip:port): {e}"));
                SocketAddr::from(([0, 0, 0, 0], 0))
            }
        };
        let listen_servers = addr("listen.servers", &raw.listen.servers);
        let listen_players = addr("listen.players", &raw.listen.players);
        let listen_transfer = addr("listen.transfer", &raw.listen.transfer);
        let listen_admin = raw.listen.admin.as_deref().map(|a| addr("listen.admin", a));
        let listen_beacon = raw.listen.beacon.as_deref().map(|a| addr("listen.beacon", a));
        let warm_pool = raw.servers.warm_pool.unwrap_or(2);
        let max_servers = raw.servers.max.unwrap_or(64);
        if max_servers == 0 || warm_pool > max_servers {
            errors.push(format!(
                "servers.warm_pool ({warm_pool}) must be at most servers.max ({max_servers}), which must be > 0"
            ));
        }
        let players_per_server = raw.servers.players_per_server.unwrap_or(75);
        if players_per_server == 0 {
            errors.push("servers.players_per_server = 0: must be > 0".to_owned());
        }
        let pack_fill_ratio = raw.servers.pack_fill_ratio.unwrap_or(0.8);
        if !(pack_fill_ratio > 0.0 && pack_fill_ratio <= 1.0) {
            errors.push(format!("servers.pack_fill_ratio = {pack_fill_ratio}: must be in (0, 1]"));
        }
        let seats_per_server =
            ((f64::from(players_per_server) * pack_fill_ratio).floor() as u32).max(1);
        let server_tick_ms = raw.servers.tick_ms.unwrap_or(33);
        if !(5..=1000).contains(&server_tick_ms) {
            errors.push(format!("servers.tick_ms = {server_tick_ms}: must be within 5..=1000"));
        }
        let report_ms = raw.report_ms.unwrap_or(1000);
        let renew_ms = raw.renew_ms.unwrap_or(5000);
        for (key, v) in [("report_ms", report_ms), ("renew_ms", renew_ms)] {
            if !(100..=60_000).contains(&v) {
                errors.push(format!("{key} = {v}: must be within 100..=60000"));
            }
        }
        if raw.site.is_empty() || raw.site.len() > 16 {
            errors.push(format!("site = {:?}: 1 to 16 characters", raw.site));
        }
        if raw.servers.program.is_none() && raw.servers.args.as_ref().is_some_and(Vec::is_empty) {
            errors.push(
                "servers.args = []: the horizon binary needs its subcommand (\"gameserver\", or \"godot-server\" and its project)"
                    .to_owned(),
            );
        }
        let server_program = match raw.servers.program {
            Some(p) => base.join(p),
            None => std::env::current_exe().unwrap_or_else(|_| PathBuf::from("horizon")),
        };
        let driver = match (raw.servers.driver.as_deref(), raw.servers.kubernetes) {
            (None | Some("process"), None) => DriverChoice::Process,
            (Some("kubernetes"), Some(mut k)) => {
                k.pod_template = base.join(&k.pod_template);
                if let Some(Err(e)) = k.agent.as_deref().map(Target::parse) {
                    errors.push(format!("servers.kubernetes.agent = {e}"));
                }
                if k.namespace.is_empty() {
                    errors.push("servers.kubernetes.namespace must not be empty".into());
                }
                if k.grace_s > 3600 {
                    errors
                        .push(format!("servers.kubernetes.grace_s = {}: at most 3600", k.grace_s));
                }
                DriverChoice::Kubernetes(k)
            }
            (Some("kubernetes"), None) => {
                errors.push(
                    "servers.driver = \"kubernetes\" needs a [servers.kubernetes] table".into(),
                );
                DriverChoice::Process
            }
            (None | Some("process"), Some(_)) => {
                errors.push(
                    "[servers.kubernetes] is given but servers.driver is not \"kubernetes\"".into(),
                );
                DriverChoice::Process
            }
            (Some(other), _) => {
                errors.push(format!(
                    "servers.driver = {other:?}: must be \"process\" or \"kubernetes\""
                ));
                DriverChoice::Process
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(AgentConfig {
            driver,
            advertise_transfer: raw.listen.advertise_transfer.unwrap_or(raw.listen.transfer),
            site: raw.site,
            core,
            core_site: raw.core_site,
            listen_servers,
            listen_players,
            listen_transfer,
            listen_admin,
            listen_beacon,
            advertise_admin: raw.listen.advertise_admin,
            ca: base.join(raw.tls.ca),
            cert: base.join(raw.tls.cert),
            key: base.join(raw.tls.key),
            player_keys: base.join(raw.tls.player_keys),
            warm_pool,
            max_servers,
            seats_per_server,
            players_per_server,
            server_tick_ms,
            server_program,
            server_args: raw.servers.args.unwrap_or_else(|| vec!["gameserver".to_owned()]),
            peers,
            report_ms,
            renew_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference ([`keys::KEYS`], docs/configuration.md) lists exactly the keys an agent reads,
    /// each once, in cells that keep the table whole.
    #[test]
    fn every_key_the_agent_reads_is_in_its_reference() {
        use horizon_admin::reference::{accepted_keys, malformed, under};
        let mut code = std::collections::BTreeSet::new();
        for key in accepted_keys::<RawConfig>("") {
            match key.as_str() {
                "listen" => code.extend(under("listen", accepted_keys::<RawListen>(""))),
                "tls" => code.extend(under("tls", accepted_keys::<RawTls>(""))),
                "servers" => {
                    let keys = accepted_keys::<RawServers>("");
                    let plain = keys.into_iter().filter(|k| k != "kubernetes").collect();
                    code.extend(under("servers", plain));
                    let kube = accepted_keys::<KubernetesConfig>("");
                    code.extend(under("servers.kubernetes", kube));
                }
                _ => {
                    code.insert(key);
                }
            }
        }
        let listed: std::collections::BTreeSet<String> =
            keys::KEYS.iter().map(|k| k.key.to_owned()).collect();
        assert_eq!(code, listed);
        assert_eq!(malformed(keys::KEYS), Vec::<String>::new());
    }

    /// The reference gives every agent key's default as the parser has it: a required key
    /// left out is refused, and a default set explicitly (by its environment variable) changes
    /// nothing.
    #[test]
    fn every_default_the_agent_reference_gives_is_the_parsers() {
        use horizon_admin::reference::{Checked, assert_defaults};
        const MINIMAL: &str = r#"
            site = "MTL"
            core = "10.0.0.1:7400"
            core_site = "PAR"
            [listen]
            servers = "127.0.0.1:7411"
            players = "0.0.0.0:7412"
            transfer = "0.0.0.0:7413"
            [tls]
            ca = "ca.pem"
            cert = "MTL.pem"
            key = "MTL.key"
            player_keys = "player.keys"
        "#;
        let rows = keys::KEYS.to_vec();
        let parse = |text: &str| AgentConfig::parse(text, Path::new("/etc/horizon"));
        // `[servers.kubernetes]` is read only with the Kubernetes driver.
        let kube = format!(
            "{MINIMAL}\n[servers]\ndriver = \"kubernetes\"\n[servers.kubernetes]\n\
             namespace = \"horizon\"\npod_template = \"pod.json\"\n"
        );
        let (of_kube, plain): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|row| row.key.starts_with("servers.kubernetes."));
        let checked = assert_defaults(&[(plain, MINIMAL), (of_kube, kube.as_str())], &[], parse);
        let count = |how| checked.iter().filter(|(_, h)| *h == how).count();
        // Every default that is a value is checked (the reference's count, so a key turned to words
        // is seen here).
        assert_eq!((count(Checked::Required), count(Checked::Value)), (12, 10), "{checked:?}");
    }

    const GOOD: &str = r#"
        site = "MTL"
        core = "10.0.0.1:7400"
        core_site = "PAR"
        [listen]
        servers = "127.0.0.1:7411"
        players = "0.0.0.0:7412"
        transfer = "0.0.0.0:7413"
        advertise_transfer = "mtl.example:7413"
        [tls]
        ca = "certs/ca.pem"
        cert = "certs/MTL.pem"
        key = "certs/MTL.key"
        player_keys = "certs/player.keys"
        [servers]
        warm_pool = 3
        [peers]
        HKG = "127.0.0.1:7513"
    "#;

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = AgentConfig::parse(GOOD, Path::new("/etc/horizon")).unwrap();
        assert_eq!(c.site, "MTL");
        assert_eq!(c.ca, Path::new("/etc/horizon/certs/ca.pem"));
        assert_eq!(c.player_keys, Path::new("/etc/horizon/certs/player.keys"));
        assert_eq!(c.warm_pool, 3);
        assert_eq!(c.server_tick_ms, 33);
        assert_eq!(c.advertise_transfer, "mtl.example:7413");
        assert_eq!(c.peers["HKG"].as_str(), "127.0.0.1:7513");
        assert_eq!(c.server_args, ["gameserver"]);
    }

    #[test]
    fn game_servers_may_be_godot_servers_but_not_nothing() {
        let godot = GOOD.replace(
            "[servers]",
            "[servers]\nargs = [\"godot-server\", \"--project\", \"/srv/game\"]",
        );
        let c = AgentConfig::parse(&godot, Path::new(".")).unwrap();
        assert_eq!(c.server_args, ["godot-server", "--project", "/srv/game"]);
        let none = GOOD.replace("[servers]", "[servers]\nargs = []");
        let errors = AgentConfig::parse(&none, Path::new(".")).unwrap_err();
        assert!(errors[0].contains("servers.args = []"), "{errors:?}");
    }

    #[test]
    fn the_core_and_peers_may_be_names() {
        let named = GOOD
            .replace("10.0.0.1:7400", "horizon-core.par.svc:7400")
            .replace("HKG = \"127.0.0.1:7513\"", "HKG = \"agent-hkg:7413\"");
        let c = AgentConfig::parse(&named, Path::new(".")).unwrap();
        assert_eq!(c.core[0].as_str(), "horizon-core.par.svc:7400");
        assert_eq!(c.peers["HKG"].as_str(), "agent-hkg:7413");
        let bad = GOOD.replace("mtl.example:7413", "mtl.example");
        let errors = AgentConfig::parse(&bad, Path::new(".")).unwrap_err();
        assert!(errors[0].contains("listen.advertise_transfer"), "{errors:?}");
    }

    #[test]
    fn the_core_may_be_a_list_of_a_core_and_its_standbys() {
        let two = GOOD.replace("\"10.0.0.1:7400\"", "[\"10.0.0.1:7400\", \"core-b:7400\"]");
        let c = AgentConfig::parse(&two, Path::new(".")).unwrap();
        let names: Vec<&str> = c.core.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, ["10.0.0.1:7400", "core-b:7400"]);
        let none = GOOD.replace("\"10.0.0.1:7400\"", "[]");
        let errors = AgentConfig::parse(&none, Path::new(".")).unwrap_err();
        assert!(errors[0].starts_with("core = []"), "{errors:?}");
        let bad = GOOD.replace("\"10.0.0.1:7400\"", "[\"10.0.0.1:7400\", \"nowhere\"]");
        let errors = AgentConfig::parse(&bad, Path::new(".")).unwrap_err();
        assert!(errors[0].starts_with("core[1] = "), "{errors:?}");
    }

    #[test]
    fn the_documented_example_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/agent-mtl.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let c = AgentConfig::parse(&text, Path::new("/etc/horizon")).unwrap();
        assert_eq!((c.site.as_str(), c.warm_pool, c.listen_transfer.port()), ("MTL", 2, 7413));
    }

    #[test]
    fn a_server_seats_players_per_server_times_the_fill_ratio() {
        let c = AgentConfig::parse(GOOD, Path::new(".")).unwrap();
        assert_eq!(c.seats_per_server, 60, "75 × 0.8 by default");
        let text = GOOD.replace(
            "warm_pool = 3",
            "warm_pool = 3\nplayers_per_server = 10\npack_fill_ratio = 0.5",
        );
        assert_eq!(AgentConfig::parse(&text, Path::new(".")).unwrap().seats_per_server, 5);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let bad = GOOD.replace("10.0.0.1:7400", "nowhere").replace(
            "warm_pool = 3",
            "warm_pool = 99\nmax = 4\ntick_ms = 1\nplayers_per_server = 0\npack_fill_ratio = 1.5",
        );
        let errors = AgentConfig::parse(&bad, Path::new(".")).unwrap_err();
        let text = errors.join("\n");
        for needle in [
            "core = \"nowhere\"",
            "warm_pool (99)",
            "tick_ms = 1",
            "servers.players_per_server = 0",
            "servers.pack_fill_ratio = 1.5",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
    }

    #[test]
    fn the_kubernetes_driver_needs_its_table_and_names_relative_to_the_file() {
        let kube = GOOD.replace(
            "[servers]\n        warm_pool = 3",
            "[servers]\nwarm_pool = 3\ndriver = \"kubernetes\"\n[servers.kubernetes]\n\
             namespace = \"horizon\"\npod_template = \"pod.json\"\n\
             agent = \"horizon-agent-mtl:7411\"",
        );
        let c = AgentConfig::parse(&kube, Path::new("/etc/horizon")).unwrap();
        let DriverChoice::Kubernetes(k) = c.driver else { panic!("{:?}", c.driver) };
        assert_eq!(k.pod_template, Path::new("/etc/horizon/pod.json"));
        assert_eq!(k.grace_s, 10);
        let errors = AgentConfig::parse(
            &GOOD.replace("warm_pool = 3", "warm_pool = 3\ndriver = \"kubernetes\""),
            Path::new("."),
        )
        .unwrap_err();
        assert!(errors[0].contains("needs a [servers.kubernetes] table"), "{errors:?}");
        let errors = AgentConfig::parse(
            &GOOD.replace("warm_pool = 3", "warm_pool = 3\ndriver = \"docker\""),
            Path::new("."),
        )
        .unwrap_err();
        assert!(errors[0].contains("\"docker\""), "{errors:?}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let errors = AgentConfig::parse(&format!("warm = 1\n{GOOD}"), Path::new(".")).unwrap_err();
        assert!(errors[0].contains("unknown field `warm`"), "{errors:?}");
    }
}
