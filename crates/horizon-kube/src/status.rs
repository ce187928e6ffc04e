//! What a pod's status says about its game server: still coming, running (ready or not), or
//! ended, with why (what the agent logs and counts as the server's exit).

use k8s_openapi::api::core::v1::Pod;

/// A game-server pod as the driver sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Not running yet (scheduling, pulling its image).
    Pending,
    /// Its container runs; `ready` is the pod's `Ready` condition.
    Running { ready: bool },
    /// It will not run (again): its server ended.
    Ended(String),
}

/// Container waiting reasons that do not resolve by waiting (the pod never starts).
const STUCK: [&str; 7] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The fate of `pod`.
pub fn fate(pod: &Pod) -> Fate {
    if pod.metadata.deletion_timestamp.is_some() {
        return Fate::Ended("pod deleted".into());
    }
    let Some(status) = &pod.status else { return Fate::Pending };
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    let terminated = containers.iter().find_map(|c| {
        let t = c.state.as_ref()?.terminated.as_ref()?;
        let reason = t.reason.as_deref().unwrap_or("Terminated");
        Some(match t.signal {
            Some(signal) => {
                format!("{reason} (container {}: exit {}, signal {signal})", c.name, t.exit_code)
            }
            None => format!("{reason} (container {}: exit {})", c.name, t.exit_code),
        })
    });
    match status.phase.as_deref() {
        Some("Failed") => {
            let why = match (&status.reason, &terminated) {
                (Some(reason), Some(t)) => format!("{reason}: {t}"),
                (Some(reason), None) => {
                    let message = status.message.as_deref().unwrap_or_default();
                    format!("{reason}: {message}").trim_end_matches(": ").to_owned()
                }
                (None, Some(t)) => t.clone(),
                (None, None) => "pod failed".into(),
            };
            return Fate::Ended(why);
        }
        Some("Succeeded") => {
            return Fate::Ended(terminated.unwrap_or_else(|| "pod succeeded".into()));
        }
        _ => {}
    }
    if let Some(t) = terminated {
        return Fate::Ended(t);
    }
    let stuck = containers.iter().find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.as_deref().filter(|r| STUCK.contains(r))?;
        Some(format!("cannot start: {reason}: {}", w.message.as_deref().unwrap_or_default()))
    });
    if let Some(why) = stuck {
        return Fate::Ended(why);
    }
    let running = !containers.is_empty()
        && containers.iter().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if status.phase.as_deref() == Some("Running") && running {
        let ready = status
            .conditions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        return Fate::Running { ready };
    }
    Fate::Pending
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn running(ready: &str) -> Pod {
        pod(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": ready}],
                "containerStatuses": [{"name": "gameserver", "image": "i", "imageID": "", "ready": true,
                    "restartCount": 0, "state": {"running": {}}}]}
        }))
    }

    fn terminated(reason: &str, code: i32, phase: &str) -> Pod {
        pod(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": phase,
                "containerStatuses": [{"name": "gameserver", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": code, "reason": reason}}}]}
        }))
    }

    #[test]
    fn running_pods_are_ready_only_with_their_ready_condition() {
        assert_eq!(fate(&running("True")), Fate::Running { ready: true });
        assert_eq!(fate(&running("False")), Fate::Running { ready: false });
        assert_eq!(fate(&pod(serde_json::json!({"metadata": {"name": "p"}}))), Fate::Pending);
    }

    #[test]
    fn every_way_a_pod_ends_is_told_apart() {
        let cases = [
            (terminated("OOMKilled", 137, "Failed"), "OOMKilled (container gameserver: exit 137)"),
            (terminated("Error", 1, "Failed"), "Error (container gameserver: exit 1)"),
            (terminated("Completed", 0, "Succeeded"), "Completed"),
            // The container died and the kubelet has not moved the phase on yet.
            (terminated("Error", 2, "Running"), "Error (container gameserver: exit 2)"),
            (
                pod(serde_json::json!({"metadata": {"name": "p"},
                    "status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}})),
                "Evicted: low on memory",
            ),
            (
                pod(
                    serde_json::json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                    "status": {"phase": "Running"}}),
                ),
                "pod deleted",
            ),
            (
                pod(serde_json::json!({"metadata": {"name": "p"},
                    "status": {"phase": "Pending", "containerStatuses": [{"name": "gameserver", "image": "i",
                        "imageID": "", "ready": false, "restartCount": 0,
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}})),
                "cannot start: ImagePullBackOff: no such image",
            ),
        ];
        for (pod, want) in cases {
            match fate(&pod) {
                Fate::Ended(why) => {
                    assert!(why.starts_with(want), "{why:?} should start with {want:?}")
                }
                other => panic!("{other:?}, expected an end: {want}"),
            }
        }
    }
}
