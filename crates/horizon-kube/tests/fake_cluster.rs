//! The Kubernetes driver against the fake API server and kubelet, over real HTTP with kube's
//! real client and watcher: pods made, run, watched and deleted as the agent needs.

use std::net::SocketAddr;
use std::time::Duration;

use horizon_agent::ServerDriver;
use horizon_kube::fake::FakeApi;
use horizon_kube::options::{Owner, parse_template};
use horizon_kube::{KubeOptions, KubernetesDriver};
use serde_json::json;

const NS: &str = "horizon";

/// How a test ends a pod.
type Kill<'a> = Box<dyn Fn() + 'a>;

fn options(api: &FakeApi, script: &str, owner: Option<Owner>) -> KubeOptions {
    let template = json!({"metadata": {"labels": {"team": "infra"}},
        "spec": {"containers": [{"name": "gameserver", "image": "horizon:test",
                                 "command": ["sh", "-c", script]}]}});
    KubeOptions {
        site: "MTL".into(),
        namespace: NS.into(),
        template: parse_template(&template.to_string()).expect("a good template"),
        agent: Some("agent.mtl:7411".into()),
        grace_s: 2,
        api: Some(api.url()),
        owner,
        max_servers: 4,
        tick_ms: 33,
    }
}

async fn fake() -> FakeApi {
    let api = FakeApi::start(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("the fake starts");
    api.create_secret(NS, "tokens", &[("server-token", "s3cret")]).expect("a secret");
    api
}

/// Polls `driver` until a server ends (or `within` passes).
async fn ended(driver: &mut KubernetesDriver, within: Duration) -> Vec<(String, String)> {
    let until = tokio::time::Instant::now() + within;
    loop {
        let ended = driver.poll_ended();
        if !ended.is_empty() || tokio::time::Instant::now() > until {
            return ended;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn agent() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7411))
}

#[tokio::test]
async fn a_server_pod_runs_with_its_environment_and_is_ready_then_stops_with_sigterm() {
    let api = fake().await;
    let mut driver = KubernetesDriver::connect(options(
        &api,
        // The container shows what it was given, and leaves cleanly on SIGTERM.
        r#"echo "$HORIZON_AGENT $HORIZON_SITE $HORIZON_SERVER_NAME $HORIZON_SERVER_TOKEN" > /dev/null;
           [ "$HORIZON_SERVER_TOKEN" = s3cret ] || exit 9; trap 'exit 0' TERM; while true; do sleep 0.05; done"#,
        None,
    ))
    .await
    .unwrap();
    driver.start("mtl-gs-0", agent(), "s3cret").unwrap();
    assert_eq!(driver.running(), 1);
    until("the pod is ready", Duration::from_secs(5), || driver.ready("mtl-gs-0")).await;
    let pods = api.pods(NS);
    assert_eq!(pods.len(), 1);
    let labels = &pods[0]["metadata"]["labels"];
    assert_eq!(
        (labels["horizon.dev/server"].as_str(), labels["team"].as_str()),
        (Some("mtl-gs-0"), Some("infra"))
    );
    assert!(driver.poll_ended().is_empty(), "the token reached the container: it runs");
    // The pool state, as the agent sees it, on the pod for operators and the autoscaler.
    let pool = |api: &FakeApi| {
        let meta = &api.pods(NS)[0]["metadata"];
        let evict = &meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"];
        (
            meta["labels"]["horizon.dev/pool"].as_str().map(str::to_owned),
            evict.as_str().map(str::to_owned),
        )
    };
    assert_eq!(pool(&api), (Some("warm".into()), Some("true".into())));
    driver.set_hosting("mtl-gs-0", true);
    until("labelled hosting", Duration::from_secs(5), || {
        pool(&api).0.as_deref() == Some("hosting")
    })
    .await;
    assert_eq!(
        pool(&api).1.as_deref(),
        Some("false"),
        "a pod holding players is not evicted to scale down"
    );
    driver.set_hosting("mtl-gs-0", false);
    until("labelled warm", Duration::from_secs(5), || pool(&api).0.as_deref() == Some("warm"))
        .await;
    driver.stop("mtl-gs-0");
    assert_eq!(driver.running(), 0);
    until("the pod is gone after SIGTERM", Duration::from_secs(5), || api.pods(NS).is_empty())
        .await;
    assert!(driver.poll_ended().is_empty(), "a server the agent stopped is not reported as ended");
}

#[tokio::test]
async fn every_way_a_pod_dies_is_seen_within_two_seconds_with_why() {
    let api = fake().await;
    let mut driver = KubernetesDriver::connect(options(&api, "exec sleep 60", None)).await.unwrap();
    for n in 0..4 {
        driver.start(&format!("mtl-gs-{n}"), agent(), "s3cret").unwrap();
    }
    assert!(driver.start("mtl-gs-9", agent(), "s3cret").is_err(), "at most max_servers");
    for n in 0..4 {
        let name = format!("mtl-gs-{n}");
        until("ready", Duration::from_secs(5), || driver.ready(&name)).await;
    }
    let pod = |n: u32| {
        let pods = api.pods(NS);
        let found = pods
            .iter()
            .find(|p| p["metadata"]["labels"]["horizon.dev/server"] == format!("mtl-gs-{n}"));
        found.unwrap()["metadata"]["name"].as_str().unwrap().to_owned()
    };
    let (p0, p1, p2) = (pod(0), pod(1), pod(2));
    let cases: [(&str, Kill, &str); 3] = [
        ("mtl-gs-0", Box::new(|| assert!(api.oom_kill(NS, &p0))), "OOMKilled"),
        ("mtl-gs-1", Box::new(|| assert!(api.evict(NS, &p1))), "Evicted"),
        ("mtl-gs-2", Box::new(|| api.delete("pods", NS, &p2).unwrap()), "pod deleted"),
    ];
    for (server, kill, why) in cases {
        kill();
        let seen = ended(&mut driver, Duration::from_secs(2)).await;
        assert_eq!(seen.len(), 1, "{server}: {seen:?}");
        assert_eq!(seen[0].0, server);
        assert!(seen[0].1.starts_with(why), "{server}: {:?} should say {why}", seen[0].1);
    }
    assert_eq!(driver.running(), 1);
}

#[tokio::test]
async fn a_pod_deleted_while_the_watch_was_compacted_away_is_still_reported() {
    let api = fake().await;
    let mut driver = KubernetesDriver::connect(options(&api, "exec sleep 60", None)).await.unwrap();
    driver.start("mtl-gs-0", agent(), "s3cret").unwrap();
    driver.start("mtl-gs-1", agent(), "s3cret").unwrap();
    until("ready", Duration::from_secs(5), || driver.ready("mtl-gs-0") && driver.ready("mtl-gs-1"))
        .await;
    // The watch ends; a pod is deleted meanwhile; the resourceVersion the watcher had is
    // compacted away. Resuming, it gets 410 Gone, lists again, and sees the pod missing.
    api.fail(Some(503));
    let name = api.pods(NS)[0]["metadata"]["name"].as_str().unwrap().to_owned();
    api.delete("pods", NS, &name).unwrap();
    until("the pod is gone", Duration::from_secs(5), || api.pods(NS).len() == 1).await;
    api.compact();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(driver.poll_ended().is_empty(), "nothing is seen while the API server fails");
    api.fail(None);
    let seen = ended(&mut driver, Duration::from_secs(10)).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1, "pod gone (not in the re-list)");
    // The other pod is still there, and still watched.
    let other = if seen[0].0 == "mtl-gs-0" { "mtl-gs-1" } else { "mtl-gs-0" };
    let left = api.pods(NS)[0]["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(api.oom_kill(NS, &left));
    let seen = ended(&mut driver, Duration::from_secs(5)).await;
    assert_eq!(seen.first().map(|s| s.0.as_str()), Some(other), "{seen:?}");
}

#[tokio::test]
async fn a_new_run_deletes_the_pods_an_earlier_run_left_and_nothing_else() {
    let api = fake().await;
    let foreign = json!({"metadata": {"name": "someone-else", "labels": {"horizon.dev/site": "MTL"}},
        "spec": {"containers": [{"name": "c", "image": "i", "command": ["sleep", "60"]}]}});
    api.create("pods", NS, foreign).unwrap();
    let mut first = KubernetesDriver::connect(options(&api, "exec sleep 60", None)).await.unwrap();
    first.start("mtl-gs-0", agent(), "s3cret").unwrap();
    until("the first run's pod", Duration::from_secs(5), || first.ready("mtl-gs-0")).await;
    // The agent dies without stopping anything (a crash): its pod is left.
    std::mem::forget(first);
    let second = KubernetesDriver::connect(options(&api, "exec sleep 60", None)).await.unwrap();
    let ours =
        |p: &serde_json::Value| p["metadata"]["labels"]["horizon.dev/agent-run"].as_str().is_some();
    until("the orphan is deleted", Duration::from_secs(5), || !api.pods(NS).iter().any(ours)).await;
    let names: Vec<String> =
        api.pods(NS).iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(names, ["someone-else"], "a pod without our labels is never touched");
    drop(second);
}

#[tokio::test]
async fn pods_are_owned_by_the_agents_pod_and_go_with_it() {
    let api = fake().await;
    let uid = api.create_outside_pod(NS, "horizon-agent-mtl").unwrap();
    let owner = Owner { name: "horizon-agent-mtl".into(), uid };
    let mut driver =
        KubernetesDriver::connect(options(&api, "exec sleep 60", Some(owner))).await.unwrap();
    driver.start("mtl-gs-0", agent(), "s3cret").unwrap();
    until("ready", Duration::from_secs(5), || driver.ready("mtl-gs-0")).await;
    api.delete("pods", NS, "horizon-agent-mtl").unwrap();
    until("the game-server pod is collected", Duration::from_secs(5), || api.pods(NS).is_empty())
        .await;
}

#[tokio::test]
async fn an_erroring_api_server_fails_starts_clearly_and_the_driver_recovers() {
    let api = fake().await;
    let mut driver = KubernetesDriver::connect(options(&api, "exec sleep 60", None)).await.unwrap();
    // Let the orphan cleanup list once, then the API server fails.
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.fail(Some(500));
    driver.start("mtl-gs-0", agent(), "s3cret").unwrap();
    let seen = ended(&mut driver, Duration::from_secs(5)).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].1.starts_with("pod not created: 500"), "{:?}", seen[0].1);
    api.fail(None);
    driver.start("mtl-gs-1", agent(), "s3cret").unwrap();
    until("a pod once the API server is back", Duration::from_secs(15), || {
        driver.ready("mtl-gs-1")
    })
    .await;
}

#[tokio::test]
async fn a_container_that_cannot_start_ends_its_server() {
    let api = fake().await;
    let mut opts = options(&api, "exec sleep 60", None);
    // The template reads a Secret that is not there.
    let spec = opts.template.spec.as_mut().unwrap();
    spec.containers[0].env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
        name: "FROM_SECRET".into(),
        value: None,
        value_from: Some(k8s_openapi::api::core::v1::EnvVarSource {
            secret_key_ref: Some(k8s_openapi::api::core::v1::SecretKeySelector {
                name: "missing".into(),
                key: "k".into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }]);
    let mut driver = KubernetesDriver::connect(opts).await.unwrap();
    driver.start("mtl-gs-0", agent(), "s3cret").unwrap();
    let seen = ended(&mut driver, Duration::from_secs(5)).await;
    assert!(seen[0].1.starts_with("cannot start: CreateContainerConfigError"), "{seen:?}");
}

#[tokio::test]
async fn an_eviction_through_the_api_stops_a_pod_gracefully_and_honours_its_disruption_budget() {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::{Api, EvictParams, PostParams};

    let api = fake().await;
    // Told to stop, the container takes a second to leave, as a game server draining does.
    let script = "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.05; done";
    let mut driver = KubernetesDriver::connect(options(&api, script, None)).await.unwrap();
    for server in ["mtl-gs-0", "mtl-gs-1"] {
        driver.start(server, agent(), "s3cret").unwrap();
    }
    until("both pods ready", Duration::from_secs(5), || {
        driver.ready("mtl-gs-0") && driver.ready("mtl-gs-1")
    })
    .await;
    // kube's own client, as `kubectl drain` and the cluster autoscaler call the API; one that
    // does not retry a 429 on its own, to see it.
    let config = kube::Config::new(api.url().parse().unwrap());
    let retrying = kube::Client::try_from(config.clone()).unwrap();
    let mut once = config;
    once.default_retry = false;
    let client = kube::Client::try_from(once).unwrap();
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "game-servers"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"team": "infra"}}}}))
    .unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    budgets.create(&PostParams::default(), &budget).await.expect("a budget");
    let pod_of = |server: &str| {
        let pods = api.pods(NS);
        let pod = pods.iter().find(|p| p["metadata"]["labels"]["horizon.dev/server"] == server);
        pod.and_then(|p| p["metadata"]["name"].as_str()).unwrap().to_owned()
    };
    let (first, second) = (pod_of("mtl-gs-0"), pod_of("mtl-gs-1"));
    let pods: Api<Pod> = Api::namespaced(client, NS);
    pods.evict(&first, &EvictParams::default()).await.expect("one pod may go");
    let refused = pods.evict(&second, &EvictParams::default()).await.unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 429 && s.reason == "TooManyRequests"),
        "the second waits while the first is still going: {refused:?}"
    );
    let second_pod =
        |api: &FakeApi| api.pods(NS).into_iter().find(|p| p["metadata"]["name"] == second.as_str());
    assert!(
        second_pod(&api).is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null()),
        "a refused eviction changes nothing"
    );
    // Retried as kube's client does by default (and `kubectl drain`): it goes through once
    // the first pod has left, after its second of draining.
    let pods: Api<Pod> = Api::namespaced(retrying, NS);
    pods.evict(&second, &EvictParams::default()).await.expect("once the first is gone");
    assert!(
        api.pods(NS).iter().all(|p| p["metadata"]["name"] != first.as_str()),
        "the second went only after the first"
    );
    assert!(second_pod(&api).is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null()));
    let mut gone = Vec::new();
    until("both servers ended", Duration::from_secs(10), || {
        gone.extend(driver.poll_ended().into_iter().map(|(s, _)| s));
        gone.len() == 2
    })
    .await;
}
