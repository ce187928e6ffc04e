//! An agent's configuration keys: the code's reference, each with its type, default and meaning.
//! `horizon config-reference` prints docs/configuration.md from these tables; a test keeps the
//! page equal to its output, and the tables equal to what the parser reads.

use horizon_admin::reference::Key;

/// Every key of an agent's configuration file, in the order the page lists them.
pub const KEYS: &[Key] = &[
    Key {
        key: "site",
        ty: "site name",
        default: "required",
        what: "this site, as in the core's `sites.list` and this site's certificate",
    },
    Key {
        key: "core",
        ty: "host:port, or a list of them",
        default: "required",
        what: "the core's `listen.control` (a name is resolved at every reconnection); with \
            standby cores, every core's (`[\"core-a:7400\", \"core-b:7400\"]`): the agent \
            dials them in turn until one answers, and only the leader listens (or, with the \
            cores' `listen.advertise_control`, a standby answers with the leader's address and \
            the agent dials that)",
    },
    Key {
        key: "core_site",
        ty: "site name",
        default: "required",
        what: "the site the core runs at (its zones simulate whom no bubble holds)",
    },
    Key {
        key: "report_ms",
        ty: "ms",
        default: "1000",
        what: "how often players, servers and backbone links are reported to the core (100 to \
            60000)",
    },
    Key {
        key: "renew_ms",
        ty: "ms",
        default: "5000",
        what: "how often the site's leases are renewed, in one batch (100 to 60000)",
    },
    Key {
        key: "peers",
        ty: "table `SITE = \"host:port\"`",
        default: "none",
        what: "other sites' transfer addresses, over what the core hands out",
    },
    Key {
        key: "listen.servers",
        ty: "ip:port",
        default: "required",
        what: "this site's game servers connect here (QUIC, a token per server)",
    },
    Key {
        key: "listen.players",
        ty: "ip:port",
        default: "required",
        what: "the player gateway (QUIC, a signed player token)",
    },
    Key {
        key: "listen.transfer",
        ty: "ip:port",
        default: "required",
        what: "other sites' agents connect here (QUIC, mutual TLS)",
    },
    Key {
        key: "listen.advertise_transfer",
        ty: "host:port",
        default: "`listen.transfer`",
        what: "how other agents reach this one's transfer port",
    },
    Key {
        key: "listen.admin",
        ty: "ip:port",
        default: "none",
        what: "the admin API (`/livez`, `/readyz`, `/metrics`, `/status`)",
    },
    Key {
        key: "listen.advertise_admin",
        ty: "host:port",
        default: "`listen.admin`",
        what: "how the core's `/status` and console link to this agent's admin API",
    },
    Key {
        key: "listen.beacon",
        ty: "ip:port",
        default: "none",
        what: "the probe beacon (UDP) clients measure their round trip to this site with",
    },
    Key { key: "tls.ca", ty: "path", default: "required", what: "the site CA's certificate" },
    Key {
        key: "tls.cert",
        ty: "path",
        default: "required",
        what: "this site's certificate (`<site>.site.horizon`)",
    },
    Key { key: "tls.key", ty: "path", default: "required", what: "its key" },
    Key {
        key: "tls.player_keys",
        ty: "path",
        default: "required",
        what: "the keys that sign players' tokens (reloaded when the file changes)",
    },
    Key {
        key: "servers.driver",
        ty: "`process`, `kubernetes`",
        default: "`process`",
        what: "what starts game servers: child processes, or pods of the Kubernetes API",
    },
    Key {
        key: "servers.program",
        ty: "path",
        default: "the `horizon` binary",
        what: "the process driver's program for each game server",
    },
    Key {
        key: "servers.args",
        ty: "strings",
        default: "`[\"gameserver\"]`",
        what: "its arguments (e.g. `[\"godot-server\", \"--project\", \"…\"]`)",
    },
    Key {
        key: "servers.warm_pool",
        ty: "servers",
        default: "2",
        what: "idle servers kept ready; more idle ones are stopped after 30 s",
    },
    Key { key: "servers.max", ty: "servers", default: "64", what: "at most this many at once" },
    Key {
        key: "servers.players_per_server",
        ty: "players",
        default: "75",
        what: "a server's capacity (as the core's `thresholds.players_per_server`)",
    },
    Key {
        key: "servers.pack_fill_ratio",
        ty: "ratio",
        default: "0.8",
        what: "regions are packed up to this share of it",
    },
    Key {
        key: "servers.tick_ms",
        ty: "ms",
        default: "33",
        what: "the game servers' tick (5 to 1000)",
    },
    Key {
        key: "servers.kubernetes.namespace",
        ty: "name",
        default: "required",
        what: "`[servers.kubernetes]`, with `driver = \"kubernetes\"`: the pods' namespace (the \
            agent's own)",
    },
    Key {
        key: "servers.kubernetes.pod_template",
        ty: "path",
        default: "required",
        what: "a `PodTemplateSpec` as JSON",
    },
    Key {
        key: "servers.kubernetes.agent",
        ty: "host:port",
        default: "`listen.servers`",
        what: "where the pods reach this agent's game-server endpoint (its Service)",
    },
    Key {
        key: "servers.kubernetes.grace_s",
        ty: "seconds",
        default: "10",
        what: "between SIGTERM and SIGKILL when the agent stops a pod",
    },
    Key {
        key: "servers.kubernetes.api",
        ty: "URL",
        default: "in-cluster, else `KUBECONFIG`",
        what: "the API server",
    },
];

/// The tables of arrays of tables (`[[zones]]`): their keys have no environment variable.
pub const ARRAYS: &[&str] = &[];
