//! The requests the Kubernetes driver sends, as the API server receives them, through kube's
//! client over a mocked service (`tower-test`): paths, selectors, bodies.

use std::net::SocketAddr;
use std::time::Duration;

use horizon_agent::ServerDriver;
use horizon_kube::options::{Owner, parse_template};
use horizon_kube::{KubeOptions, KubernetesDriver};
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// What one request was.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    query: String,
    body: Value,
}

fn options() -> KubeOptions {
    let template = json!({"spec": {"containers": [{"name": "gameserver", "image": "horizon:1"}]}});
    KubeOptions {
        site: "MTL".into(),
        namespace: "horizon".into(),
        template: parse_template(&template.to_string()).expect("a good template"),
        agent: Some("horizon-mtl-agent-servers.horizon.svc:7411".into()),
        grace_s: 7,
        api: None,
        owner: Some(Owner { name: "horizon-mtl-agent-0".into(), uid: "uid-agent".into() }),
        max_servers: 8,
        tick_ms: 33,
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() + 1 => {
                let hex =
                    std::str::from_utf8(&bytes[i + 1..(i + 3).min(bytes.len())]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn answer(code: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string().into_bytes()))
        .expect("a response")
}

/// Answers like an API server with no pods, holding watches open, until `count` requests other
/// than watches and one watch have been seen.
async fn serve(mut handle: Handle, count: usize) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut watches = Vec::new();
    let watching = |s: &Seen| s.query.contains("watch=true");
    while seen.iter().filter(|s| !watching(s)).count() < count || !seen.iter().any(watching) {
        let next = tokio::time::timeout(Duration::from_secs(10), handle.next_request()).await;
        let Ok(Some((request, reply))) = next else { break };
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let s = Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: decode(parts.uri.query().unwrap_or("")),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        let response = match s.method.as_str() {
            "GET" if s.query.contains("watch=true") => {
                watches.push(reply);
                seen.push(s);
                continue;
            }
            "GET" => answer(
                200,
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": []}),
            ),
            "POST" => {
                let mut pod = s.body.clone();
                pod["metadata"]["resourceVersion"] = json!("6");
                answer(201, pod)
            }
            "DELETE" => answer(
                200,
                json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": s.path.rsplit('/').next()}}),
            ),
            _ => answer(405, json!({})),
        };
        reply.send_response(response);
        seen.push(s);
    }
    seen
}

#[tokio::test]
async fn the_driver_lists_orphans_creates_from_the_template_watches_its_run_and_deletes_with_grace()
{
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "horizon");
    let mut driver = KubernetesDriver::with_client(client, options());
    let run = driver.run().to_owned();
    let agent = SocketAddr::from(([0, 0, 0, 0], 7411));
    driver.start("mtl-gs-0", agent, "hz1.server.mtl-gs-0.t").unwrap();
    driver.stop("mtl-gs-0");
    // The orphan list, the watcher's list, the creation, the deletion.
    let seen = serve(handle, 4).await;
    let pods = "/api/v1/namespaces/horizon/pods";
    let site = "labelSelector=app.kubernetes.io/managed-by=horizon-agent,horizon.dev/site=MTL";

    let writes: Vec<&Seen> = seen.iter().filter(|s| s.method != "GET").collect();
    assert_eq!(writes.len(), 2, "{seen:#?}");
    let orphans =
        seen.iter().find(|s| s.method == "GET" && !s.query.contains("agent-run")).unwrap();
    assert_eq!(orphans.path, pods);
    assert!(orphans.query.contains(site), "{orphans:?}");

    let create = writes[0];
    assert_eq!((create.method.as_str(), create.path.as_str()), ("POST", pods));
    let pod = &create.body;
    assert_eq!(pod["metadata"]["name"], format!("mtl-gs-0-{run}"));
    assert_eq!(pod["metadata"]["namespace"], "horizon");
    assert_eq!(pod["metadata"]["labels"]["horizon.dev/agent-run"], run.as_str());
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "uid-agent");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
    let agent_env = env.iter().find(|e| e["name"] == "HORIZON_AGENT").unwrap();
    assert_eq!(agent_env["value"], "horizon-mtl-agent-servers.horizon.svc:7411");
    let token = env.iter().find(|e| e["name"] == "HORIZON_SERVER_TOKEN").unwrap();
    assert_eq!(token["value"], "hz1.server.mtl-gs-0.t", "the server's own token");

    let delete = writes[1];
    assert_eq!(delete.method, "DELETE");
    assert_eq!(delete.path, format!("{pods}/mtl-gs-0-{run}"));
    assert_eq!(delete.body["gracePeriodSeconds"], 7);
    assert_eq!(delete.body["propagationPolicy"], "Background");

    // The watcher lists, then watches, only this run's pods, with bookmarks.
    let listed = seen.iter().find(|s| {
        s.method == "GET" && s.query.contains("agent-run") && !s.query.contains("watch=true")
    });
    assert!(listed.is_some(), "{seen:#?}");
    let watch = seen.iter().find(|s| s.query.contains("watch=true")).unwrap();
    assert!(watch.query.contains(&format!("{site},horizon.dev/agent-run={run}")), "{watch:?}");
    assert!(watch.query.contains("allowWatchBookmarks=true"), "{watch:?}");
    assert!(watch.query.contains("resourceVersion=5"), "{watch:?}");
}
