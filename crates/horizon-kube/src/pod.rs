//! The pod of one game server, made from the template: our labels, the owner, the agent's
//! address, site and name in the environment, and the token the agent minted for this server
//! alone (it names the server; docs/security.md says who can read it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::options::{GAMESERVER_CONTAINER, KubeOptions};

/// `app.kubernetes.io/managed-by` on every pod the driver makes: with the site, the selector
/// of what the driver may delete (nothing else, ever).
pub const MANAGED_BY: &str = "horizon-agent";
pub const SITE_LABEL: &str = "horizon.dev/site";
pub const SERVER_LABEL: &str = "horizon.dev/server";
/// Which run of the agent made the pod (pods of an earlier run are orphans).
pub const RUN_LABEL: &str = "horizon.dev/agent-run";
/// `warm` when made; the pool state as the agent sees it.
pub const POOL_LABEL: &str = "horizon.dev/pool";

/// The selector of every game-server pod of `site`, whichever agent run made it.
pub fn site_selector(site: &str) -> String {
    format!("app.kubernetes.io/managed-by={MANAGED_BY},{SITE_LABEL}={}", label_value(site))
}

/// The selector of the pods of this run.
pub fn run_selector(site: &str, run: &str) -> String {
    format!("{},{RUN_LABEL}={run}", site_selector(site))
}

/// The pod's name: the server's, lower-cased, with the run so that a restarted agent never
/// collides with the pods of its previous run while they terminate.
pub fn pod_name(server: &str, run: &str) -> String {
    let server: String = server
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(63 - run.len() - 1)
        .collect();
    format!("{}-{run}", server.trim_matches('-'))
}

fn label_value(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect()
}

/// The environment the game server reads (`horizon gameserver` takes each as its flag).
pub const AGENT_ENV: &str = "HORIZON_AGENT";
pub const SITE_ENV: &str = "HORIZON_SITE";
pub const NAME_ENV: &str = "HORIZON_SERVER_NAME";
pub const TICK_ENV: &str = "HORIZON_TICK_MS";
/// How long a stopping game server drains its regions (`--drain-grace-s`): unless the
/// template sets it, 2 s under the pod's `terminationGracePeriodSeconds`, so that the server
/// is done before the kubelet's SIGKILL.
pub const DRAIN_ENV: &str = "HORIZON_DRAIN_GRACE_S";

/// The pod for `server` of run `run`, which dials the agent at `agent`.
pub fn server_pod(o: &KubeOptions, run: &str, server: &str, agent: &str, token: &str) -> Pod {
    let template = o.template.clone();
    let mut meta = template.metadata.unwrap_or_default();
    meta.name = Some(pod_name(server, run));
    meta.generate_name = None;
    meta.namespace = Some(o.namespace.clone());
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in [
        ("app.kubernetes.io/name", "horizon-gameserver".to_owned()),
        ("app.kubernetes.io/component", "gameserver".to_owned()),
        ("app.kubernetes.io/part-of", "horizon".to_owned()),
        ("app.kubernetes.io/managed-by", MANAGED_BY.to_owned()),
        (SITE_LABEL, label_value(&o.site)),
        (SERVER_LABEL, label_value(server)),
        (RUN_LABEL, run.to_owned()),
        (POOL_LABEL, "warm".to_owned()),
    ] {
        labels.insert(k.to_owned(), v);
    }
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(SAFE_TO_EVICT.into(), "true".into());
    meta.owner_references = o.owner.as_ref().map(|owner| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]
    });
    let mut spec = template.spec.unwrap_or_default();
    spec.restart_policy = Some("Never".into());
    let grace = *spec.termination_grace_period_seconds.get_or_insert(i64::from(o.grace_s));
    let index = spec.containers.iter().position(|c| c.name == GAMESERVER_CONTAINER).unwrap_or(0);
    if let Some(container) = spec.containers.get_mut(index) {
        let ours = [AGENT_ENV, SITE_ENV, NAME_ENV, TICK_ENV, horizon_agent::SERVER_TOKEN_ENV];
        let env = container.env.get_or_insert_with(Vec::new);
        env.retain(|e| !ours.contains(&e.name.as_str()));
        for (name, value) in [
            (AGENT_ENV, agent.to_owned()),
            (SITE_ENV, o.site.clone()),
            (NAME_ENV, server.to_owned()),
            (TICK_ENV, o.tick_ms.to_string()),
            (horizon_agent::SERVER_TOKEN_ENV, token.to_owned()),
        ] {
            env.push(EnvVar { name: name.into(), value: Some(value), value_from: None });
        }
        if !env.iter().any(|e| e.name == DRAIN_ENV) {
            let drain = (grace - 2).max(0).to_string();
            env.push(EnvVar { name: DRAIN_ENV.into(), value: Some(drain), value_from: None });
        }
    }
    Pod { metadata: meta, spec: Some(spec), status: None }
}

/// The merge patch of a pod's pool state: `horizon.dev/pool` (`hosting` or `warm`), and the
/// cluster autoscaler told not to evict a pod that holds players.
pub fn pool_patch(hosting: bool) -> serde_json::Value {
    let (pool, evict) = if hosting { ("hosting", "false") } else { ("warm", "true") };
    serde_json::json!({"metadata": {
        "labels": {POOL_LABEL: pool},
        "annotations": {SAFE_TO_EVICT: evict},
    }})
}

/// The cluster autoscaler's annotation: may it evict the pod to scale a node down.
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// The server a pod of ours runs (its label), if any.
pub fn server_of(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(SERVER_LABEL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Owner, parse_template};

    fn options() -> KubeOptions {
        let template = parse_template(
            r#"{"metadata": {"labels": {"team": "a", "horizon.dev/site": "spoofed"}},
                "spec": {"containers": [
                  {"name": "sidecar", "image": "s"},
                  {"name": "gameserver", "image": "horizon:1",
                   "env": [{"name": "HORIZON_SERVER_TOKEN", "value": "leaked"}, {"name": "KEEP", "value": "1"}]}]}}"#,
        )
        .unwrap();
        KubeOptions {
            site: "MTL".into(),
            namespace: "horizon".into(),
            template,
            agent: None,
            grace_s: 7,
            api: None,
            owner: Some(Owner { name: "agent-0".into(), uid: "u-1".into() }),
            max_servers: 8,
            tick_ms: 33,
        }
    }

    #[test]
    fn a_server_pod_carries_our_labels_owner_environment_and_its_own_token_only() {
        let pod =
            server_pod(&options(), "ab12cd", "mtl-gs-3", "agent.mtl:7411", "hz1.server.mtl-gs-3");
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("mtl-gs-3-ab12cd"));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[SITE_LABEL], "MTL", "our labels win over the template's");
        assert_eq!(labels[SERVER_LABEL], "mtl-gs-3");
        assert_eq!(labels["app.kubernetes.io/managed-by"], MANAGED_BY);
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Pod", "u-1"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(7));
        assert!(spec.containers[0].env.is_none(), "only the game-server container is changed");
        let env = spec.containers[1].env.as_ref().unwrap();
        let get = |n: &str| env.iter().find(|e| e.name == n).unwrap();
        assert_eq!(get("KEEP").value.as_deref(), Some("1"));
        assert_eq!(get(AGENT_ENV).value.as_deref(), Some("agent.mtl:7411"));
        assert_eq!(get(NAME_ENV).value.as_deref(), Some("mtl-gs-3"));
        assert_eq!(get(DRAIN_ENV).value.as_deref(), Some("5"), "done before the SIGKILL");
        let token = get(horizon_agent::SERVER_TOKEN_ENV);
        assert_eq!(
            token.value.as_deref(),
            Some("hz1.server.mtl-gs-3"),
            "the template's is replaced"
        );
        assert_eq!(env.iter().filter(|e| e.name == horizon_agent::SERVER_TOKEN_ENV).count(), 1);
        assert_eq!(server_of(&pod), Some("mtl-gs-3"));
    }

    #[test]
    fn pod_names_are_dns_labels() {
        let name = pod_name(&"X_Y.".repeat(30), "ab12cd");
        assert!(name.len() <= 63, "{name}");
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        assert!(name.ends_with("-ab12cd"));
    }
}
