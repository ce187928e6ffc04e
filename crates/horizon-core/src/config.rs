//! The core's configuration: one TOML file, parsed once, every problem reported together.
//! `[sites]` and `[thresholds]` read exactly as in scenario files (docs/scenarios.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use horizon_mesh::{Aabb, Delegation, Placement, Sites, Thresholds, Vec3, WorldId, ZoneSpec};
use serde::Deserialize;

pub(crate) mod keys;

/// Everything the core runs with.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    pub sites: Sites,
    pub thresholds: Thresholds,
    /// Agents connect here (control channel, mutual TLS).
    pub listen_control: SocketAddr,
    /// The admin HTTP API: `/livez`, `/readyz`, `/metrics`, `/status` and the console.
    pub listen_admin: SocketAddr,
    /// `listen.advertise_control`: where agents reach this core's control port (`host:port`),
    /// written in the election with etcd. A core standing by then answers agents with the
    /// leader's (`not_leader`); `None`: its control port stays closed until it leads.
    pub advertise_control: Option<String>,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Directory of the durable store (created if missing): with the file store, its log and
    /// the copies; with etcd, the copies alone (see [`StoreKind`]).
    pub store: PathBuf,
    /// `[store] kind`: where the ownership log lives.
    pub store_kind: StoreKind,
    /// `[[zones]]`: the core site's zone boxes at the first start (a world with none is one
    /// zone). Once the store holds zones, the layout it holds is taken back instead.
    pub zones: Vec<ZoneSpec>,
    /// `[placement] stage`: how far the rollout has gone (docs/running.md, "Rolling out").
    pub stage: Stage,
    /// `[[delegations]]`: what `fixed` delegates to which relay site.
    pub delegations: Vec<Delegation>,
}

/// Where the core keeps its ownership log (generation, leases, player id blocks, copy
/// pointers: small records). The copies themselves are files in `[store] path` either way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// A checksummed log on the core's own volume, locked against a second core: the embedded
    /// default, for one core.
    #[default]
    File,
    /// etcd: every replica of the core campaigns, one leads, the others stand by
    /// (docs/running.md, "A standby core").
    Etcd(EtcdOptions),
}

/// `[store]` with `kind = "etcd"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// `http://host:port` of each etcd member.
    pub endpoints: Vec<String>,
    /// Every key the core writes starts with this (one universe per prefix).
    pub prefix: String,
    /// The election lease, in whole seconds (2–60): how long a dead leader's standby waits
    /// before it takes over, and how long a leader cut from etcd keeps granting.
    pub election_ttl_s: u32,
    /// The universe's name, written under the prefix by its first leader: a core of another
    /// universe given the same prefix refuses to lead there. `None`: the core site's name.
    pub universe: Option<String>,
    /// TLS to etcd (`https://` endpoints); `None`: plain `http://`.
    pub tls: Option<EtcdTls>,
}

/// `[store] tls_*`: how the core talks TLS to etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA that signed etcd's server certificates (PEM).
    pub ca: PathBuf,
    /// This core's client certificate and key (PEM), for etcd's `--client-cert-auth`.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name etcd's certificate is checked against, when not the endpoints' host.
    pub server_name: Option<String>,
}

/// A stage of the rollout: what the core may delegate. Parsed once, here; the brain is told
/// what it may decide through [`Stage::placement`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stage {
    /// Stage 1: players enter at the core site's gateway, everything is simulated in core-site
    /// zones (as today), and their probe tables say who would gain from a relay site
    /// (`horizon_core_players_would_gain`, `/measure.csv`).
    Measure,
    /// Players enter at their home site's gateway; everything is simulated in core-site zones,
    /// handover-free. Their inputs and updates travel the backbone.
    Relay,
    /// Stage 3: each `[[delegations]]` region is simulated on its relay site, whatever the
    /// scoring says; everything else in core-site zones, as under `relay`.
    Fixed,
    /// SMD-G: bubbles carved out of the zones and placed on the best site.
    #[default]
    Dynamic,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Measure, Stage::Relay, Stage::Fixed, Stage::Dynamic];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Measure => "measure",
            Stage::Relay => "relay",
            Stage::Fixed => "fixed",
            Stage::Dynamic => "dynamic",
        }
    }

    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|stage| stage.as_str() == s)
    }

    /// What the brain may decide at this stage.
    pub fn placement(self) -> Placement {
        match self {
            Stage::Measure | Stage::Relay => Placement::AllCore,
            Stage::Fixed => Placement::Fixed,
            Stage::Dynamic => Placement::Smdg,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    sites: toml::Value,
    thresholds: Option<toml::Value>,
    tick_s: Option<f64>,
    listen: RawListen,
    tls: RawTls,
    store: RawStore,
    #[serde(default)]
    zones: Vec<RawZone>,
    #[serde(default)]
    delegations: Vec<horizon_mesh::file::DelegationTable>,
    placement: Option<RawPlacement>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlacement {
    stage: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawZone {
    /// The world's id, as game servers and clients number worlds (default 0).
    #[serde(default)]
    world: u32,
    min: [f64; 3],
    max: [f64; 3],
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListen {
    control: String,
    admin: String,
    advertise_control: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    path: PathBuf,
    kind: Option<String>,
    endpoints: Option<Vec<String>>,
    prefix: Option<String>,
    election_ttl_s: Option<u32>,
    universe: Option<String>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_server_name: Option<String>,
}

impl CoreConfig {
    /// Reads and checks `path`; relative paths are relative to the file.
    pub fn load(path: &Path) -> Result<CoreConfig, Vec<String>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
        // `HORIZON_CONFIG__…` variables set values over the file's (docs/running.md).
        let text = horizon_admin::overrides::apply(&text, std::env::vars()).map_err(|errors| {
            errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect::<Vec<_>>()
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        CoreConfig::parse(&text, base).map_err(|errors| {
            errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect()
        })
    }

    pub fn parse(text: &str, base: &Path) -> Result<CoreConfig, Vec<String>> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut errors = Vec::new();
        let tick_s = raw.tick_s.unwrap_or(5.0);
        if !(tick_s.is_finite() && (0.1..=60.0).contains(&tick_s)) {
            errors.push(format!("tick_s = {tick_s}: must be within 0.1..=60"));
        }
        let period_ms = (tick_s.clamp(0.1, 60.0) * 1000.0).round() as u64;
        let parsed = horizon_mesh::file::sites_and_thresholds(raw.sites, raw.thresholds, period_ms);
        let mut addr = |key: &str, v: &str| match v.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(e) => {
                errors.push(format!("{key} = {v:?}: not an address (ip:port): {e}"));
                SocketAddr::from(([0, 0, 0, 0], 0))
            }
        };
        let listen_control = addr("listen.control", &raw.listen.control);
        let listen_admin = addr("listen.admin", &raw.listen.admin);
        let advertise_control = raw.listen.advertise_control.clone();
        if let Some(a) = &advertise_control
            && let Err(e) = horizon_transport::Target::parse(a)
        {
            errors.push(format!("listen.advertise_control: {e}"));
        }
        let stage = match raw.placement.and_then(|p| p.stage) {
            None => Stage::default(),
            Some(name) => Stage::parse(&name).unwrap_or_else(|| {
                let known: Vec<&str> = Stage::ALL.iter().map(|s| s.as_str()).collect();
                errors.push(format!(
                    "placement.stage = {name:?}: not a stage this core runs (one of {})",
                    known.join(", ")
                ));
                Stage::default()
            }),
        };
        let (sites, thresholds) = match parsed {
            Ok(p) => p,
            Err(problems) => {
                errors.extend(problems.into_iter().map(|p| format!("{}: {}", p.key, p.why)));
                return Err(errors);
            }
        };
        let v = |p: [f64; 3]| Vec3::new(p[0], p[1], p[2]);
        let zones: Vec<ZoneSpec> = raw
            .zones
            .iter()
            .map(|z| ZoneSpec {
                world: WorldId(z.world),
                bounds: Aabb { min: v(z.min), max: v(z.max) },
            })
            .collect();
        if let Err(bad) = horizon_mesh::zones::validate_specs(&zones, thresholds.position_limit_m())
        {
            errors.extend(bad.into_iter().map(|e| e.to_string()));
        }
        let mut problems = Vec::new();
        let delegations = horizon_mesh::file::delegations(
            &raw.delegations,
            &sites,
            thresholds.position_limit_m(),
            &mut problems,
        );
        errors.extend(problems.into_iter().map(|p| format!("{}: {}", p.key, p.why)));
        match (stage, raw.delegations.is_empty()) {
            (Stage::Fixed, true) => errors.push(
                "placement.stage = \"fixed\": needs at least one [[delegations]] (world, site, optional min and max)".to_owned(),
            ),
            (Stage::Fixed, false) | (_, true) => {}
            (_, false) => errors.push(format!(
                "[[delegations]]: read only under placement.stage = \"fixed\" (this core runs {:?})",
                stage.as_str()
            )),
        }
        let store_kind = store_kind(&raw.store, base, &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(CoreConfig {
            sites,
            thresholds,
            listen_control,
            listen_admin,
            advertise_control,
            ca: base.join(raw.tls.ca),
            cert: base.join(raw.tls.cert),
            key: base.join(raw.tls.key),
            store: base.join(&raw.store.path),
            store_kind,
            zones,
            delegations,
            stage,
        })
    }
}

/// `[store] tls_*`: a CA for `https://` endpoints (all of them, or none), a client certificate
/// and key together.
fn etcd_tls(
    raw: &RawStore,
    endpoints: &[String],
    base: &Path,
    errors: &mut Vec<String>,
) -> Option<EtcdTls> {
    let https = endpoints.iter().filter(|e| e.starts_with("https://")).count();
    if https > 0 && https < endpoints.len() {
        errors.push("store.endpoints: all https:// (with store.tls_ca) or all http://".to_owned());
    }
    let identity = match (&raw.tls_cert, &raw.tls_key) {
        (Some(cert), Some(key)) => Some((base.join(cert), base.join(key))),
        (None, None) => None,
        _ => {
            errors.push("store.tls_cert and store.tls_key: give both, or neither".to_owned());
            None
        }
    };
    let Some(ca) = &raw.tls_ca else {
        if https > 0 {
            errors.push(
                "store.tls_ca: https:// endpoints need the CA that signed etcd's certificates"
                    .to_owned(),
            );
        }
        if identity.is_some() || raw.tls_server_name.is_some() {
            errors.push("store.tls_ca: the other store.tls_* keys need it".to_owned());
        }
        return None;
    };
    if https == 0 && !endpoints.is_empty() {
        errors.push("store.tls_ca: TLS to etcd needs https:// endpoints".to_owned());
    }
    Some(EtcdTls { ca: base.join(ca), identity, server_name: raw.tls_server_name.clone() })
}

/// `[store] kind` and the keys that go with it, every problem named.
fn store_kind(raw: &RawStore, base: &Path, errors: &mut Vec<String>) -> StoreKind {
    let etcd_keys = [
        ("endpoints", raw.endpoints.is_some()),
        ("prefix", raw.prefix.is_some()),
        ("election_ttl_s", raw.election_ttl_s.is_some()),
        ("universe", raw.universe.is_some()),
        ("tls_ca", raw.tls_ca.is_some()),
        ("tls_cert", raw.tls_cert.is_some()),
        ("tls_key", raw.tls_key.is_some()),
        ("tls_server_name", raw.tls_server_name.is_some()),
    ];
    match raw.kind.as_deref() {
        None | Some("file") => {
            for (key, given) in etcd_keys {
                if given {
                    errors.push(format!("store.{key}: read only with store.kind = \"etcd\""));
                }
            }
            StoreKind::File
        }
        Some("etcd") => {
            let endpoints = raw.endpoints.clone().unwrap_or_default();
            if endpoints.is_empty() {
                errors.push(
                    "store.endpoints: store.kind = \"etcd\" needs at least one etcd member (\"http://host:2379\")"
                        .to_owned(),
                );
            }
            for (i, e) in endpoints.iter().enumerate() {
                let rest = e.strip_prefix("http://").or_else(|| e.strip_prefix("https://"));
                if rest.is_none_or(|r| r.is_empty() || r.contains('/')) {
                    errors.push(format!(
                        "store.endpoints[{i}] = {e:?}: not an etcd endpoint (http://host:port)"
                    ));
                }
            }
            let prefix = raw.prefix.clone().unwrap_or_else(|| "/horizon".to_owned());
            if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.len() < 2 {
                errors.push(format!(
                    "store.prefix = {prefix:?}: must start with / and not end with one (\"/horizon\")"
                ));
            }
            let election_ttl_s = raw.election_ttl_s.unwrap_or(3);
            if !(2..=60).contains(&election_ttl_s) {
                errors.push(format!(
                    "store.election_ttl_s = {election_ttl_s}: must be within 2..=60 (etcd's lease minimum is 2 s)"
                ));
            }
            let universe = raw.universe.clone();
            if let Some(u) = &universe
                && (u.is_empty()
                    || u.len() > 64
                    || !u.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
            {
                errors.push(format!(
                    "store.universe = {u:?}: 1–64 letters, digits, '.', '_' or '-' (\"prod-eu\")"
                ));
            }
            let tls = etcd_tls(raw, &endpoints, base, errors);
            StoreKind::Etcd(EtcdOptions { endpoints, prefix, election_ttl_s, universe, tls })
        }
        Some(other) => {
            errors.push(format!("store.kind = {other:?}: one of \"file\", \"etcd\""));
            StoreKind::File
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference ([`keys::KEYS`], docs/configuration.md) lists exactly the keys the core reads,
    /// each once, in cells that keep the table whole.
    #[test]
    fn every_key_the_core_reads_is_in_its_reference() {
        use horizon_admin::reference::{accepted_keys, malformed, under};
        use horizon_mesh::file::{DelegationTable, SitesTable, ThresholdsTable};
        let mut code = std::collections::BTreeSet::new();
        for key in accepted_keys::<RawConfig>("") {
            match key.as_str() {
                "listen" => code.extend(under("listen", accepted_keys::<RawListen>(""))),
                "tls" => code.extend(under("tls", accepted_keys::<RawTls>(""))),
                "store" => code.extend(under("store", accepted_keys::<RawStore>(""))),
                "zones" => code.extend(under("zones", accepted_keys::<RawZone>(""))),
                "placement" => code.extend(under("placement", accepted_keys::<RawPlacement>(""))),
                "sites" => code.extend(under("sites", accepted_keys::<SitesTable>(""))),
                "delegations" => {
                    code.extend(under("delegations", accepted_keys::<DelegationTable>("")));
                }
                "thresholds" => {
                    let keys = accepted_keys::<ThresholdsTable>("");
                    let plain = keys.into_iter().filter(|k| k != "weights").collect();
                    code.extend(under("thresholds", plain));
                    let weights = accepted_keys::<ThresholdsTable>("weights");
                    code.extend(under("thresholds.weights", weights));
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

    /// The reference gives every core key's default as the parser has it: a required key
    /// left out is refused, and a default set explicitly (by its environment variable) changes
    /// nothing.
    #[test]
    fn every_default_the_core_reference_gives_is_the_parsers() {
        use horizon_admin::reference::{Checked, assert_defaults};
        const MINIMAL: &str = r#"
            [sites]
            core = "PAR"
            list = ["PAR"]
            [listen]
            control = "0.0.0.0:7400"
            admin = "127.0.0.1:7480"
            [tls]
            ca = "ca.pem"
            cert = "core.pem"
            key = "core.key"
            [store]
            path = "state"
        "#;
        let rows = keys::KEYS.to_vec();
        let parse = |text: &str| CoreConfig::parse(text, Path::new("/etc/horizon"));
        // The store's keys beyond `path` and `kind` are read only with etcd.
        let etcd = MINIMAL.replace(
            "path = \"state\"",
            "path = \"state\"\nkind = \"etcd\"\nendpoints = [\"http://10.0.0.5:2379\"]",
        );
        let (of_etcd, plain): (Vec<_>, Vec<_>) = rows.into_iter().partition(|row| {
            row.key.starts_with("store.") && row.key != "store.path" && row.key != "store.kind"
        });
        let groups = [(plain, MINIMAL), (of_etcd, etcd.as_str())];
        let checked = assert_defaults(&groups, &["zones", "delegations"], parse);
        let count = |how| checked.iter().filter(|(_, h)| *h == how).count();
        // Every default that is a value is checked (the reference's count, so a key turned to words
        // is seen here).
        assert_eq!((count(Checked::Required), count(Checked::Value)), (8, 25), "{checked:?}");
    }

    const GOOD: &str = r#"
        [sites]
        core = "PAR"
        list = ["PAR", "MTL", "HKG"]
        [sites.backbone_rtt_ms]
        PAR-MTL = 85
        PAR-HKG = 185
        MTL-HKG = 225
        [thresholds]
        dwell_s = 10
        [listen]
        control = "0.0.0.0:7400"
        admin = "127.0.0.1:7480"
        [tls]
        ca = "certs/ca.pem"
        cert = "certs/PAR.pem"
        key = "certs/PAR.key"
        [store]
        path = "state"
    "#;

    #[test]
    fn a_good_file_parses() {
        let c = CoreConfig::parse(GOOD, Path::new("/etc/horizon")).unwrap();
        assert_eq!(c.sites.len(), 3);
        assert_eq!(c.thresholds.dwell_ms, 10_000);
        assert_eq!(c.thresholds.period_ms, 5_000);
        assert_eq!(c.store, Path::new("/etc/horizon/state"));
        assert_eq!(c.stage, Stage::Dynamic);
    }

    #[test]
    fn the_store_is_a_file_by_default_or_etcd_with_its_keys_checked() {
        let c = CoreConfig::parse(GOOD, Path::new("/")).unwrap();
        assert_eq!(c.store_kind, StoreKind::File);
        let etcd = GOOD.replace(
            "path = \"state\"",
            "path = \"state\"\nkind = \"etcd\"\nendpoints = [\"http://10.0.0.5:2379\"]",
        );
        let c = CoreConfig::parse(&etcd, Path::new("/")).unwrap();
        let want = EtcdOptions {
            endpoints: vec!["http://10.0.0.5:2379".into()],
            prefix: "/horizon".into(),
            election_ttl_s: 3,
            universe: None,
            tls: None,
        };
        assert_eq!(c.store_kind, StoreKind::Etcd(want));
        let bad = GOOD.replace(
            "path = \"state\"",
            "path = \"state\"\nkind = \"etcd\"\nendpoints = [\"10.0.0.5:2379\"]\nprefix = \"horizon/\"\nelection_ttl_s = 1\nuniverse = \"prod eu\"",
        );
        let errors = CoreConfig::parse(&bad, Path::new("/")).unwrap_err();
        assert!(errors[0].starts_with("store.endpoints[0] = "), "{errors:?}");
        assert!(errors[1].starts_with("store.prefix = "), "{errors:?}");
        assert!(errors[2].starts_with("store.election_ttl_s = 1"), "{errors:?}");
        assert!(errors[3].starts_with("store.universe = \"prod eu\""), "{errors:?}");
        let named = etcd.replace("path = \"state\"", "path = \"state\"\nuniverse = \"prod-eu\"");
        let c = CoreConfig::parse(&named, Path::new("/")).unwrap();
        let StoreKind::Etcd(o) = c.store_kind else { panic!("etcd") };
        assert_eq!(o.universe.as_deref(), Some("prod-eu"));
        let none = GOOD.replace("path = \"state\"", "path = \"state\"\nkind = \"etcd\"");
        let errors = CoreConfig::parse(&none, Path::new("/")).unwrap_err();
        assert!(errors[0].starts_with("store.endpoints: "), "{errors:?}");
        let stray = GOOD.replace("path = \"state\"", "path = \"state\"\nprefix = \"/x\"");
        let errors = CoreConfig::parse(&stray, Path::new("/")).unwrap_err();
        assert_eq!(errors, ["store.prefix: read only with store.kind = \"etcd\""]);
        let odd = GOOD.replace("path = \"state\"", "path = \"state\"\nkind = \"zk\"");
        let errors = CoreConfig::parse(&odd, Path::new("/")).unwrap_err();
        assert_eq!(errors, ["store.kind = \"zk\": one of \"file\", \"etcd\""]);
    }

    #[test]
    fn tls_to_etcd_needs_https_endpoints_a_ca_and_a_whole_client_identity() {
        let etcd = |keys: &str| {
            let store = format!("path = \"state\"\nkind = \"etcd\"\n{keys}");
            CoreConfig::parse(&GOOD.replace("path = \"state\"", &store), Path::new("/etc/h"))
        };
        let good = etcd(
            "endpoints = [\"https://etcd-0:2379\"]\ntls_ca = \"etcd/ca.crt\"\n\
             tls_cert = \"etcd/tls.crt\"\ntls_key = \"etcd/tls.key\"\ntls_server_name = \"etcd\"",
        );
        let StoreKind::Etcd(o) = good.unwrap().store_kind else { panic!("etcd") };
        let tls = o.tls.expect("TLS");
        assert_eq!(tls.ca, Path::new("/etc/h/etcd/ca.crt"));
        let want = (PathBuf::from("/etc/h/etcd/tls.crt"), PathBuf::from("/etc/h/etcd/tls.key"));
        assert_eq!(tls.identity, Some(want));
        assert_eq!(tls.server_name.as_deref(), Some("etcd"));
        let no_ca = etcd("endpoints = [\"https://etcd-0:2379\"]").unwrap_err();
        assert!(no_ca[0].starts_with("store.tls_ca: https:// endpoints need"), "{no_ca:?}");
        let half = etcd("endpoints = [\"https://e:2379\"]\ntls_ca = \"ca\"\ntls_cert = \"c\"");
        assert_eq!(half.unwrap_err(), ["store.tls_cert and store.tls_key: give both, or neither"]);
        let mixed = etcd("endpoints = [\"https://a:2379\", \"http://b:2379\"]\ntls_ca = \"ca\"");
        assert!(mixed.unwrap_err()[0].contains("all https://"));
        let plain = etcd("endpoints = [\"http://a:2379\"]\ntls_ca = \"ca\"").unwrap_err();
        assert_eq!(plain, ["store.tls_ca: TLS to etcd needs https:// endpoints"]);
        let stray = GOOD.replace("path = \"state\"", "path = \"state\"\ntls_ca = \"ca\"");
        let errors = CoreConfig::parse(&stray, Path::new("/")).unwrap_err();
        assert_eq!(errors, ["store.tls_ca: read only with store.kind = \"etcd\""]);
        // Where a standby sends agents: host:port.
        let admin = "admin = \"127.0.0.1:7480\"";
        let told = GOOD.replace(admin, &format!("{admin}\nadvertise_control = \"core-0.x:7400\""));
        let c = CoreConfig::parse(&told, Path::new("/")).unwrap();
        assert_eq!(c.advertise_control.as_deref(), Some("core-0.x:7400"));
        let bad = GOOD.replace(admin, &format!("{admin}\nadvertise_control = \"core-0\""));
        let errors = CoreConfig::parse(&bad, Path::new("/")).unwrap_err();
        assert!(errors[0].starts_with("listen.advertise_control: \"core-0\""), "{errors:?}");
    }

    #[test]
    fn the_stage_is_read_and_an_unknown_one_named() {
        let relay = format!("{GOOD}\n[placement]\nstage = \"relay\"\n");
        let c = CoreConfig::parse(&relay, Path::new(".")).unwrap();
        assert_eq!((c.stage, c.stage.placement()), (Stage::Relay, Placement::AllCore));
        let measure = relay.replace("\"relay\"", "\"measure\"");
        let c = CoreConfig::parse(&measure, Path::new(".")).unwrap();
        assert_eq!((c.stage, c.stage.placement()), (Stage::Measure, Placement::AllCore));
        let bad = relay.replace("\"relay\"", "\"everywhere\"");
        let errors = CoreConfig::parse(&bad, Path::new(".")).unwrap_err().join("\n");
        assert!(errors.contains("placement.stage = \"everywhere\""), "{errors}");
        assert!(errors.contains("measure, relay, fixed, dynamic"), "{errors}");
    }

    #[test]
    fn delegations_are_read_under_the_fixed_stage_and_bad_ones_named() {
        let fixed = format!("{GOOD}\n[placement]\nstage = \"fixed\"\n");
        let planet = "[[delegations]]\nworld = 2\nmin = [0.0, -10.0, -10.0]\nmax = [100.0, 10.0, 10.0]\nsite = \"MTL\"\n";
        let whole = "[[delegations]]\nworld = 3\nsite = \"HKG\"\n";
        let c = CoreConfig::parse(&format!("{fixed}{planet}{whole}"), Path::new(".")).unwrap();
        assert_eq!((c.stage, c.stage.placement()), (Stage::Fixed, Placement::Fixed));
        assert_eq!(c.delegations.len(), 2);
        assert_eq!(c.sites.name(c.delegations[0].site).as_str(), "MTL");
        assert!(c.delegations[0].bounds.is_some() && c.delegations[1].bounds.is_none());
        let errors =
            |text: String| CoreConfig::parse(&text, Path::new(".")).unwrap_err().join("\n");
        let e = errors(fixed.clone());
        assert!(e.contains("needs at least one [[delegations]]"), "{e}");
        let e = errors(format!("{fixed}{}", planet.replace("\"MTL\"", "\"SYD\"")));
        assert!(e.contains("delegations[0].site: \"SYD\" is not a site of [sites]"), "{e}");
        let e = errors(format!("{fixed}{}", planet.replace("max = [100.0, 10.0, 10.0]\n", "")));
        assert!(e.contains("delegations[0]: give both min and max"), "{e}");
        let e = errors(format!("{fixed}{planet}{}", planet.replace("\"MTL\"", "\"HKG\"")));
        assert!(e.contains("delegations[1]: it overlaps delegations[0]"), "{e}");
        let e = errors(format!("{fixed}{}", whole.replace("\"HKG\"", "\"PAR\"")));
        assert!(e.contains("delegations[0]: it delegates to the core site"), "{e}");
        let e = errors(format!("{GOOD}\n{planet}"));
        assert!(e.contains("[[delegations]]: read only under placement.stage = \"fixed\""), "{e}");
    }

    #[test]
    fn the_documented_example_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/core.toml");
        let c = CoreConfig::load(&path).unwrap();
        assert_eq!(c.listen_control.port(), 7400);
        assert_eq!(c.thresholds.hold_ms, 180_000);
        assert_eq!(c.zones.len(), 2);
    }

    #[test]
    fn every_problem_is_reported() {
        let bad = GOOD.replace("MTL-HKG = 225", "").replace("0.0.0.0:7400", "everywhere");
        let errors = CoreConfig::parse(&bad, Path::new(".")).unwrap_err().join("\n");
        assert!(errors.contains("listen.control"), "{errors}");
        assert!(errors.contains("MTL") && errors.contains("HKG"), "{errors}");
    }

    #[test]
    fn zones_are_read_and_bad_boxes_refused_by_index() {
        let zone = |x0: f64, x1: f64| {
            format!("[[zones]]\nworld = 3\nmin = [{x0}, -10.0, -10.0]\nmax = [{x1}, 10.0, 10.0]\n")
        };
        let good = format!("{GOOD}\n{}{}", zone(0.0, 100.0), zone(100.0, 200.0));
        let c = CoreConfig::parse(&good, Path::new(".")).unwrap();
        assert_eq!(c.zones.len(), 2);
        assert_eq!((c.zones[1].world, c.zones[1].bounds.min.x), (WorldId(3), 100.0));
        let bad = format!("{GOOD}\n{}{}{}", zone(0.0, 100.0), zone(50.0, 150.0), zone(9.0, 9.0));
        let errors = CoreConfig::parse(&bad, Path::new(".")).unwrap_err().join("\n");
        assert!(errors.contains("zones[1]: its box overlaps zones[0]"), "{errors}");
        assert!(errors.contains("zones[2]: its box is empty"), "{errors}");
    }
}
