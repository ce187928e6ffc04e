//! The fake kubelet: runs each pod's game-server container as a local process and writes its
//! status as the real kubelet would; stops it on deletion (SIGTERM, SIGKILL after the grace
//! period), then removes the pod.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::store::{Key, Objects};
use super::{NODE, Shared};
use crate::options::GAMESERVER_CONTAINER;

/// How often the kubelet looks again without being woken (grace deadlines).
const RESYNC: Duration = Duration::from_millis(100);

/// The containers running, by pod uid.
#[derive(Debug, Default)]
pub(crate) struct Processes {
    procs: HashMap<String, Proc>,
}

#[derive(Debug)]
struct Proc {
    signals: mpsc::UnboundedSender<Signal>,
    /// When SIGTERM was sent (the pod is being deleted).
    term_at: Option<Instant>,
    ending: Option<Ending>,
}

#[derive(Debug)]
enum Signal {
    Term,
    Kill,
}

/// How the kubelet itself ends a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    OomKilled,
    Evicted,
}

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut changed = shared.subscribe();
    loop {
        reconcile(&shared);
        tokio::select! {
            result = changed.changed() => if result.is_err() { return },
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

fn processes(shared: &Shared) -> std::sync::MutexGuard<'_, Processes> {
    shared.kubelet.lock().unwrap_or_else(|p| p.into_inner())
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap_or_default().to_owned()
}

fn reconcile(shared: &Arc<Shared>) {
    let pods = shared.objects().pods();
    for (key, pod) in pods {
        let node = pod["spec"]["nodeName"].as_str();
        if node.is_some_and(|n| n != NODE) {
            continue;
        }
        let uid = uid(&pod);
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            let grace = pod["metadata"]["deletionGracePeriodSeconds"].as_u64().unwrap_or(30);
            let mut procs = processes(shared);
            match procs.procs.get_mut(&uid) {
                Some(proc) => {
                    let now = Instant::now();
                    let term_at = *proc.term_at.get_or_insert_with(|| {
                        let _ = proc.signals.send(Signal::Term);
                        now
                    });
                    if now >= term_at + Duration::from_secs(grace) {
                        let _ = proc.signals.send(Signal::Kill);
                    }
                }
                None => {
                    drop(procs);
                    shared.update(|o, now| o.remove(&key, now));
                }
            }
            continue;
        }
        if node.is_none()
            && pod["status"]["phase"] == "Pending"
            && pod["status"]["containerStatuses"].is_null()
        {
            start(shared, key, &pod);
        }
    }
}

/// The container to run: the game server's, else the first.
fn container(pod: &Value) -> &Value {
    let containers = pod["spec"]["containers"].as_array();
    let by_name = containers.and_then(|c| c.iter().find(|c| c["name"] == GAMESERVER_CONTAINER));
    by_name.or(containers.and_then(|c| c.first())).unwrap_or(&Value::Null)
}

/// The container's environment, its references resolved; `Err` is why it cannot start.
fn environment(
    objects: &Objects,
    key: &Key,
    pod: &Value,
    container: &Value,
) -> Result<Vec<(String, String)>, String> {
    let mut env = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap_or_default().to_owned();
        let value = if let Some(v) = var["value"].as_str() {
            v.to_owned()
        } else if let Some(secret) = var["valueFrom"]["secretKeyRef"].as_object() {
            let secret_name = secret.get("name").and_then(Value::as_str).unwrap_or_default();
            let wanted = secret.get("key").and_then(Value::as_str).unwrap_or_default();
            let found = objects.get(&("secrets".into(), key.1.clone(), secret_name.into()));
            let Some(found) = found else {
                return Err(format!("secret \"{secret_name}\" not found"));
            };
            let Some(data) = found["data"][wanted].as_str() else {
                return Err(format!(
                    "couldn't find key {wanted} in Secret {}/{secret_name}",
                    key.1
                ));
            };
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|e| format!("Secret {secret_name}: {e}"))?;
            String::from_utf8_lossy(&bytes).into_owned()
        } else if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "metadata.name" => key.2.clone(),
                "metadata.namespace" => key.1.clone(),
                "metadata.uid" => uid(pod),
                "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
                "spec.nodeName" => NODE.into(),
                other => {
                    return Err(format!("fieldRef {other:?} is not modelled by the fake kubelet"));
                }
            }
        } else {
            String::new()
        };
        env.push((name, value));
    }
    Ok(env)
}

/// Starts the pod's container, or writes why it cannot start.
fn start(shared: &Arc<Shared>, key: Key, pod: &Value) {
    let container = container(pod).clone();
    let name = container["name"].as_str().unwrap_or("main").to_owned();
    let words: Vec<String> = ["command", "args"]
        .iter()
        .flat_map(|k| container[*k].as_array().cloned().unwrap_or_default())
        .filter_map(|w| w.as_str().map(str::to_owned))
        .collect();
    let env = environment(&shared.objects(), &key, pod, &container);
    let spawned = match (env, words.split_first()) {
        (Err(why), _) => Err(("CreateContainerConfigError", why)),
        (Ok(_), None) => Err((
            "RunContainerError",
            "the fake kubelet runs the container's command; it has none".into(),
        )),
        (Ok(env), Some((program, args))) => tokio::process::Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .envs(env)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ("RunContainerError", format!("{program}: {e}"))),
    };
    let image = container["image"].clone();
    let uid = uid(pod);
    let child = match spawned {
        Ok(child) => child,
        Err((reason, message)) => {
            tracing::warn!(pod = %key.2, reason, %message, "fake kubelet: container not started");
            shared.update(|o, _| {
                o.modify(&key, |p| {
                    p["spec"]["nodeName"] = json!(NODE);
                    p["status"]["containerStatuses"] = json!([{"name": name, "image": image, "imageID": "",
                        "ready": false, "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]);
                })
            });
            return;
        }
    };
    let (signals, signals_rx) = mpsc::unbounded_channel();
    processes(shared)
        .procs
        .insert(uid.clone(), Proc { signals: signals.clone(), term_at: None, ending: None });
    let present = shared.update(|o, now| {
        o.running.insert(uid.clone());
        let conditions: Vec<Value> = ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
            .iter()
            .map(|c| json!({"type": c, "status": "True", "lastTransitionTime": now}))
            .collect();
        o.modify(&key, |p| {
            p["spec"]["nodeName"] = json!(NODE);
            p["status"] = json!({
                "phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1", "startTime": now,
                "conditions": conditions,
                "containerStatuses": [{"name": name, "image": image, "imageID": "", "ready": true,
                    "started": true, "restartCount": 0, "state": {"running": {"startedAt": now}}}],
            });
        })
    });
    if present.is_none() {
        // Deleted while it started: nothing may run for a pod that is gone.
        let _ = signals.send(Signal::Kill);
    }
    tokio::spawn(supervise(shared.clone(), key, uid, name, child, signals_rx));
}

/// Waits for the container's end, passing signals on; then writes its status (or removes the
/// pod, if it was being deleted).
async fn supervise(
    shared: Arc<Shared>,
    key: Key,
    uid: String,
    name: String,
    mut child: Child,
    mut signals: mpsc::UnboundedReceiver<Signal>,
) {
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            Some(signal) = signals.recv() => match signal {
                Signal::Term => {
                    let pid = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32));
                    if let Some(pid) = pid {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    }
                }
                Signal::Kill => {
                    let _ = child.start_kill();
                }
            },
        }
    };
    let ending = processes(&shared).procs.remove(&uid).and_then(|p| p.ending);
    let (code, signal) = match &status {
        Ok(s) => (s.code().unwrap_or(128 + s.signal().unwrap_or(0)), s.signal()),
        Err(_) => (128, None),
    };
    shared.update(|o, now| {
        o.running.remove(&uid);
        let deleting = o.get(&key).is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null());
        if deleting {
            o.remove(&key, now);
            return;
        }
        let (phase, reason, code) = match ending {
            Some(Ending::OomKilled) => ("Failed", "OOMKilled", 137),
            Some(Ending::Evicted) => ("Failed", "Error", code),
            None if code == 0 => ("Succeeded", "Completed", 0),
            None => ("Failed", "Error", code),
        };
        o.modify(&key, |p| {
            let status = &mut p["status"];
            status["phase"] = json!(phase);
            if ending == Some(Ending::Evicted) {
                status["reason"] = json!("Evicted");
                status["message"] = json!("The node was low on resource: memory.");
            }
            for condition in status["conditions"].as_array_mut().into_iter().flatten() {
                if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                    condition["status"] = json!("False");
                }
            }
            let mut terminated = json!({"exitCode": code, "reason": reason, "finishedAt": now});
            if let Some(signal) = signal {
                terminated["signal"] = json!(signal);
            }
            status["containerStatuses"] = json!([{"name": name, "image": "", "imageID": "",
                "ready": false, "restartCount": 0, "state": {"terminated": terminated}}]);
        });
    });
}

/// Ends a pod's container as the kubelet would on its own account. False if it runs nothing.
pub(crate) fn end(shared: &Shared, namespace: &str, name: &str, ending: Ending) -> bool {
    let key: Key = ("pods".into(), namespace.into(), name.into());
    let Some(uid) = shared.objects().get(&key).map(uid) else { return false };
    let mut procs = processes(shared);
    let Some(proc) = procs.procs.get_mut(&uid) else { return false };
    proc.ending = Some(ending);
    proc.signals.send(Signal::Kill).is_ok()
}

/// Kills every container (the fake is going away).
pub(crate) fn kill_all(shared: &Shared) {
    for proc in processes(shared).procs.values() {
        let _ = proc.signals.send(Signal::Kill);
    }
}
