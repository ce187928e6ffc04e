//! What the Kubernetes driver runs with: the agent's `[servers.kubernetes]` table, its pod
//! template read and checked, and the agent's own pod (the owner of the game-server pods).

use horizon_agent::{AgentConfig, DriverChoice};
use k8s_openapi::api::core::v1::PodTemplateSpec;

/// The environment variables the chart sets from the downward API: the agent's own pod,
/// which owns every game-server pod (deleting the agent's pod deletes them).
pub const POD_NAME_ENV: &str = "HORIZON_POD_NAME";
pub const POD_UID_ENV: &str = "HORIZON_POD_UID";

/// The container of the template that runs the game server: the one with this name, else the
/// first.
pub const GAMESERVER_CONTAINER: &str = "gameserver";

/// The agent's pod, the owner of every pod the driver creates.
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    pub name: String,
    pub uid: String,
}

/// Everything [`crate::KubernetesDriver`] needs.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    pub site: String,
    pub namespace: String,
    pub template: PodTemplateSpec,
    /// What the pods dial (`host:port`); `None`: the address the agent listens on.
    pub agent: Option<String>,
    pub grace_s: u32,
    /// The API server's URL; `None`: in-cluster, else `KUBECONFIG`.
    pub api: Option<String>,
    pub owner: Option<Owner>,
    pub max_servers: usize,
    pub tick_ms: u32,
}

impl KubeOptions {
    /// The driver's options from an agent's configuration, its template file read and checked,
    /// the owner from `env`. `Ok(None)` if the agent runs the process driver. Every problem is
    /// reported, one per line.
    pub fn from_config(
        cfg: &AgentConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<KubeOptions>, Vec<String>> {
        let DriverChoice::Kubernetes(k) = &cfg.driver else { return Ok(None) };
        let mut errors = Vec::new();
        let template = match std::fs::read_to_string(&k.pod_template) {
            Ok(text) => match parse_template(&text) {
                Ok(t) => Some(t),
                Err(e) => {
                    errors.push(format!(
                        "servers.kubernetes.pod_template {}: {e}",
                        k.pod_template.display()
                    ));
                    None
                }
            },
            Err(e) => {
                errors.push(format!(
                    "servers.kubernetes.pod_template {}: cannot read: {e}",
                    k.pod_template.display()
                ));
                None
            }
        };
        let owner = match (env(POD_NAME_ENV), env(POD_UID_ENV)) {
            (Some(name), Some(uid)) if !name.is_empty() && !uid.is_empty() => {
                Some(Owner { name, uid })
            }
            (None, None) => None,
            _ => {
                errors.push(format!(
                    "{POD_NAME_ENV} and {POD_UID_ENV} must be set together (the downward API)"
                ));
                None
            }
        };
        match template {
            Some(template) if errors.is_empty() => Ok(Some(KubeOptions {
                site: cfg.site.clone(),
                namespace: k.namespace.clone(),
                template,
                agent: k.agent.clone(),
                grace_s: k.grace_s,
                api: k.api.clone(),
                owner,
                max_servers: cfg.max_servers,
                tick_ms: cfg.server_tick_ms,
            })),
            _ => Err(errors),
        }
    }
}

/// Reads a `PodTemplateSpec` (JSON) and checks what the driver relies on: a spec with a
/// game-server container that has an image, and no restart policy but `Never` (a crashed
/// server must end its pod, so that its bubble fails over instead of restarting empty).
pub fn parse_template(text: &str) -> Result<PodTemplateSpec, String> {
    let template: PodTemplateSpec =
        serde_json::from_str(text).map_err(|e| format!("not a PodTemplateSpec: {e}"))?;
    let spec = template.spec.as_ref().ok_or("the template has no spec")?;
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == GAMESERVER_CONTAINER)
        .or(spec.containers.first())
        .ok_or("spec.containers is empty")?;
    if container.image.as_deref().is_none_or(str::is_empty) {
        return Err(format!("container {:?} has no image", container.name));
    }
    if let Some(policy) = spec.restart_policy.as_deref().filter(|p| *p != "Never") {
        return Err(format!(
            "spec.restartPolicy = {policy:?}: game-server pods are never restarted in place \
             (a crashed server's bubble fails over); leave it out or set \"Never\""
        ));
    }
    Ok(template)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_must_be_a_pod_template_with_an_image_and_no_restarts() {
        let good = r#"{"spec": {"containers": [{"name": "gameserver", "image": "horizon:1"}]}}"#;
        assert!(parse_template(good).is_ok());
        for (bad, why) in [
            (r#"{"spec": {"containers": "x"}}"#, "not a PodTemplateSpec"),
            (r#"{"metadata": {}}"#, "no spec"),
            (r#"{"spec": {"containers": []}}"#, "empty"),
            (r#"{"spec": {"containers": [{"name": "gameserver"}]}}"#, "no image"),
            (
                r#"{"spec": {"restartPolicy": "Always", "containers": [{"name": "g", "image": "i"}]}}"#,
                "restartPolicy",
            ),
        ] {
            let e = parse_template(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
