//! `horizon demo --driver kube`: every game server is a pod, created, watched and deleted by
//! each agent's Kubernetes driver through the API of a fake API server whose fake kubelet runs
//! the pods' containers as local processes (`horizon_kube::fake`, which lists what it does
//! not model).

use std::net::SocketAddr;
use std::sync::Arc;

use horizon_agent::{ProcessOptions, ServerDriver};
use horizon_kube::fake::FakeApi;
use horizon_kube::options::{Owner, parse_template};
use horizon_kube::{KubeOptions, KubernetesDriver};
use horizon_testkit::DriverFactory;

/// The namespace of the demo's pods.
pub(crate) const NAMESPACE: &str = "horizon-demo";

#[derive(Debug)]
pub(crate) struct KubeDemo {
    api: Arc<FakeApi>,
}

impl KubeDemo {
    pub(crate) async fn start() -> std::io::Result<KubeDemo> {
        let api = FakeApi::start(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        Ok(KubeDemo { api: Arc::new(api) })
    }

    pub(crate) fn url(&self) -> String {
        self.api.url()
    }

    /// Game-server pods still in the API (after the demo stopped: none).
    pub(crate) fn pods_left(&self) -> usize {
        let agent = |p: &serde_json::Value| p["spec"]["nodeName"] == "outside";
        self.api.pods(NAMESPACE).iter().filter(|p| !agent(p)).count()
    }

    /// Game-server pods by their `horizon.dev/pool` label (`hosting`, `warm`).
    pub(crate) fn pods_by_pool(&self) -> serde_json::Value {
        let mut by: std::collections::BTreeMap<String, u64> = Default::default();
        for pod in self.api.pods(NAMESPACE) {
            if let Some(pool) = pod["metadata"]["labels"]["horizon.dev/pool"].as_str() {
                *by.entry(pool.to_owned()).or_default() += 1;
            }
        }
        serde_json::json!(by)
    }

    /// Each agent's driver: a pod standing for the agent (the owner of its game servers), and
    /// a pod template running `horizon gameserver`.
    pub(crate) fn drivers(&self) -> DriverFactory {
        let api = self.api.clone();
        DriverFactory(Arc::new(move |p: &ProcessOptions| {
            let site = p.site.to_ascii_lowercase();
            let agent_pod = format!("horizon-agent-{site}");
            let uid = api.create_outside_pod(NAMESPACE, &agent_pod)?;
            // The program, then what it runs (gameserver, or godot-server and its project).
            let mut command = vec![p.program.display().to_string()];
            command.extend(p.args.iter().cloned());
            command.extend([
                "--ca".into(),
                p.ca.display().to_string(),
                "--exit-with-parent".into(),
            ]);
            let template = serde_json::json!({
                "metadata": {"labels": {"app.kubernetes.io/instance": "demo"}},
                "spec": {"containers": [{
                    "name": "gameserver",
                    "image": "horizon:demo",
                    "command": command,
                }]},
            });
            let opts = KubeOptions {
                site: p.site.clone(),
                namespace: NAMESPACE.into(),
                template: parse_template(&template.to_string())?,
                agent: None,
                grace_s: 5,
                api: Some(api.url()),
                owner: Some(Owner { name: agent_pod, uid }),
                max_servers: p.max_servers,
                tick_ms: p.tick_ms,
            };
            let driver = KubernetesDriver::at_url(opts).map_err(|e| e.to_string())?;
            Ok(Box::new(driver) as Box<dyn ServerDriver>)
        }))
    }
}
