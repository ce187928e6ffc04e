//! The core's configuration keys: the code's reference, each with its type, default and meaning.
//! `horizon config-reference` prints docs/configuration.md from these tables; a test keeps the
//! page equal to its output, and the tables equal to what the parser reads.

use horizon_admin::reference::Key;

/// Every key of the core's configuration file, in the order the page lists them.
pub const KEYS: &[Key] = &[
    Key {
        key: "tick_s",
        ty: "seconds",
        default: "5",
        what: "the scoring period: the brain places and moves regions every `tick_s` (0.1 to 60)",
    },
    Key {
        key: "sites.core",
        ty: "site name",
        default: "required",
        what: "the core's site: its zones simulate everyone no bubble holds",
    },
    Key {
        key: "sites.list",
        ty: "site names",
        default: "required",
        what: "every site of the universe, the core's among them",
    },
    Key {
        key: "sites.backbone_rtt_ms",
        ty: "table `\"A-B\" = ms`",
        default: "none",
        what: "round trips between sites used until the agents measure them; a pair may be left \
            out when both its sites have coordinates (it starts at its physical floor)",
    },
    Key {
        key: "sites.coordinates",
        ty: "table `SITE = [lat, lon]` degrees",
        default: "none",
        what: "where sites are: each pair's physical floor is its great-circle distance there and \
            back at fibre speed (200,000 km/s). A measured round trip below it is a probe or \
            clock bug, counted (`horizon_backbone_below_floor_total`) and not used",
    },
    Key {
        key: "sites.ready_servers",
        ty: "table `SITE = n`",
        default: "none",
        what: "for simulations only: the core learns each site's ready servers from its agent",
    },
    Key {
        key: "thresholds.cap_ms",
        ty: "ms",
        default: "180",
        what: "the fairness cap: no site is chosen that puts a counted player farther than this \
            (design.md §3)",
    },
    Key {
        key: "thresholds.gain_ms",
        ty: "ms",
        default: "25",
        what: "a region moves only for at least this much less latency per counted player",
    },
    Key {
        key: "thresholds.dwell_s",
        ty: "seconds",
        default: "30",
        what: "a better site must stay better this long before a move",
    },
    Key {
        key: "thresholds.hold_s",
        ty: "seconds",
        default: "180",
        what: "after a move, a region stays at least this long (failovers excepted)",
    },
    Key {
        key: "thresholds.weights.pilot",
        ty: "weight",
        default: "2",
        what: "a pilot's weight in the weighted majority",
    },
    Key { key: "thresholds.weights.player", ty: "weight", default: "1", what: "a player's" },
    Key { key: "thresholds.weights.afk", ty: "weight", default: "0.05", what: "an AFK player's" },
    Key {
        key: "thresholds.group_radius_m",
        ty: "metres",
        default: "300",
        what: "players closer than this play together",
    },
    Key {
        key: "thresholds.border_margin_m",
        ty: "metres",
        default: "300",
        what: "a bubble's box around its players",
    },
    Key {
        key: "thresholds.merge_distance_m",
        ty: "metres",
        default: "2000",
        what: "groups closer than this must share a site before they meet (preventive merge)",
    },
    Key {
        key: "thresholds.lead_s",
        ty: "seconds",
        default: "30",
        what: "how far ahead a moving player's reach is scaled by their speed",
    },
    Key {
        key: "thresholds.players_per_server",
        ty: "players",
        default: "75",
        what: "a game server's capacity",
    },
    Key {
        key: "thresholds.tps_min",
        ty: "ticks per second",
        default: "20",
        what: "a server ticking slower is overloaded",
    },
    Key {
        key: "thresholds.merge_fill_ratio",
        ty: "ratio",
        default: "0.8",
        what: "the two halves of a region's latest cut are joined when their load stays under this share of a server",
    },
    Key {
        key: "thresholds.pack_fill_ratio",
        ty: "ratio",
        default: "0.8",
        what: "servers are packed with regions up to this share of their capacity",
    },
    Key {
        key: "thresholds.split_after_samples",
        ty: "samples",
        default: "10",
        what: "an overloaded region (a zone, a bubble's part) is split after this many load samples in a row (one a second; SMD's rule)",
    },
    Key {
        key: "thresholds.merge_after_samples",
        ty: "samples",
        default: "30",
        what: "the halves of a region's latest cut are joined after this many quiet samples",
    },
    Key {
        key: "thresholds.settle_s",
        ty: "seconds",
        default: "15",
        what: "no other zone change on a server this long after one",
    },
    Key {
        key: "thresholds.lease_ttl_s",
        ty: "seconds",
        default: "30",
        what: "a lease's length: a region whose holder stops renewing fails over after it",
    },
    Key {
        key: "thresholds.lease_drift_margin_s",
        ty: "seconds",
        default: "2",
        what: "the clock drift a lease allows for before another holder is granted",
    },
    Key {
        key: "listen.control",
        ty: "ip:port",
        default: "required",
        what: "where agents connect (QUIC over UDP, mutual TLS)",
    },
    Key {
        key: "listen.admin",
        ty: "ip:port",
        default: "required",
        what: "the admin API: `/livez`, `/readyz`, `/metrics`, `/status`, the console (plain \
            HTTP)",
    },
    Key {
        key: "listen.advertise_control",
        ty: "host:port",
        default: "none",
        what: "with `store.kind = \"etcd\"`: where agents reach this core's control port, written \
            in the election. A core standing by then answers every agent's hello with the \
            leader's (`not_leader`), and the agent dials it next; without it, a standby's \
            control port stays closed until it leads. The chart sets it to the pod's address",
    },
    Key { key: "tls.ca", ty: "path", default: "required", what: "the site CA's certificate" },
    Key {
        key: "tls.cert",
        ty: "path",
        default: "required",
        what: "the core's own certificate (`core.horizon`)",
    },
    Key { key: "tls.key", ty: "path", default: "required", what: "its key" },
    Key {
        key: "store.path",
        ty: "path",
        default: "required",
        what: "the store's directory: with the file store, generation, leases, player ids and the \
            universe backup (fsync'd log and snapshots, locked against a second core); with \
            etcd, the universe backup's copies alone (share it between the replicas: \
            [running.md](running.md#a-standby-core))",
    },
    Key {
        key: "store.kind",
        ty: "`file`, `etcd`",
        default: "`file`",
        what: "where the ownership log lives: a file on the core's volume (one core), or etcd (a \
            core and its standbys; the binary built `--features etcd`, as the container image \
            is)",
    },
    Key {
        key: "store.endpoints",
        ty: "list of `http://host:port` (or all `https://`)",
        default: "required with `etcd`",
        what: "the etcd members",
    },
    Key {
        key: "store.tls_ca",
        ty: "path",
        default: "none",
        what: "with `https://` endpoints (all of them): the CA that signed etcd's server \
            certificates (PEM)",
    },
    Key {
        key: "store.tls_cert",
        ty: "path",
        default: "none",
        what: "this core's client certificate (PEM), for etcd's `--client-cert-auth`: with \
            `store.tls_key`",
    },
    Key {
        key: "store.tls_key",
        ty: "path",
        default: "none",
        what: "its key (PEM): with `store.tls_cert`",
    },
    Key {
        key: "store.tls_server_name",
        ty: "DNS name",
        default: "the endpoints' host",
        what: "the name etcd's certificates are checked against, when the endpoints are addresses",
    },
    Key {
        key: "store.prefix",
        ty: "key prefix",
        default: "`/horizon`",
        what: "every key the core writes starts with it: one universe per prefix (starts with \
            `/`, does not end with one)",
    },
    Key {
        key: "store.universe",
        ty: "1–64 of `A-Z a-z 0-9 . _ -`",
        default: "the core site's name",
        what: "the universe's name, written under the prefix by its first leader: a core of \
            another universe given the same etcd prefix refuses to lead there (and resigns), \
            as does one whose build is older than the store's key layout (`format`)",
    },
    Key {
        key: "store.election_ttl_s",
        ty: "whole seconds, 2–60",
        default: "3",
        what: "the election lease: a dead leader's standby takes over within about this long, and \
            a leader cut from etcd stops granting a quarter of it before it could lapse",
    },
    Key {
        key: "zones.world",
        ty: "world id",
        default: "0",
        what: "`[[zones]]`: a zone of the core site, in this world (none: a world is one zone)",
    },
    Key {
        key: "zones.min",
        ty: "`[x, y, z]` metres",
        default: "required",
        what: "the zone's box, in the world's local coordinates",
    },
    Key { key: "zones.max", ty: "`[x, y, z]` metres", default: "required", what: "" },
    Key {
        key: "placement.stage",
        ty: "`measure`, `relay`, `fixed`, `dynamic`",
        default: "`dynamic`",
        what: "the rollout stage ([running.md](running.md#rolling-out))",
    },
    Key {
        key: "delegations.world",
        ty: "world id",
        default: "0",
        what: "`[[delegations]]`, under `fixed`: a world, or a box of one, delegated to a relay \
            site as one region",
    },
    Key {
        key: "delegations.site",
        ty: "site name",
        default: "required",
        what: "the relay site that simulates it (not the core's)",
    },
    Key {
        key: "delegations.min",
        ty: "`[x, y, z]` metres",
        default: "the whole world",
        what: "the delegated box (both `min` and `max`, or neither)",
    },
    Key { key: "delegations.max", ty: "`[x, y, z]` metres", default: "the whole world", what: "" },
];

/// The tables of arrays of tables (`[[zones]]`): their keys have no environment variable.
pub const ARRAYS: &[&str] = &["zones", "delegations"];
