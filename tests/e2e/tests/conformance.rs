//! The protocol document against the running daemons: `tests/conformance/gateway_client.py`, a
//! player written from docs/protocol.md alone (Python, aioquic, no code of ours), joins a real
//! agent's gateway, plays, and checks what it reads (docs/protocol.md sections 1-7). It needs
//! `python3` with `aioquic` (`tests/run` installs it).

use std::path::PathBuf;
use std::time::Duration;

use horizon_testkit::{Sandbox, SandboxOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_written_from_the_protocol_document_plays_on_the_real_daemons() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let has_aioquic = std::process::Command::new("python3")
        .args(["-c", "import aioquic"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_aioquic,
        "python3 with aioquic is needed: python3 -m pip install aioquic (tests/run does)"
    );
    let dir = std::env::temp_dir().join(format!("horizon-conformance-{}", std::process::id()));
    let opts = SandboxOptions::three_sites(
        PathBuf::from(env!("CARGO_BIN_EXE_horizon-under-test")),
        dir.clone(),
    );
    let mut sandbox = Sandbox::start(opts).await.expect("sandbox starts");
    assert!(sandbox.wait_ready(1, Duration::from_secs(60)).await, "servers ready");
    let token = sandbox.player_tokens.mint("py-conformance");
    // A player living near Montreal: every beacon as it reaches it (MTL 10 ms, PAR 95, HKG
    // 235), every site's gateway; it must pick MTL from its own measure.
    let mut beacons = Vec::new();
    for site in ["PAR", "MTL", "HKG"] {
        let (_, beacon) = sandbox.reach("MTL", site).await.expect("emulators").expect("a site");
        beacons.push(format!("--beacon={site}={beacon}"));
    }
    let gateways: Vec<String> =
        sandbox.gateways.iter().map(|(site, addr)| format!("--gateway-of={site}={addr}")).collect();
    assert_eq!(gateways.len(), 3, "every site has a gateway");
    let run = tokio::process::Command::new("python3")
        .arg(root.join("tests/conformance/gateway_client.py"))
        .args(["--token", &token])
        .arg("--ca")
        .arg(&sandbox.ca)
        .args(&beacons)
        .args(&gateways)
        .output();
    let out =
        tokio::time::timeout(Duration::from_secs(60), run).await.expect("in time").expect("runs");
    let stats = sandbox.agent_stats("MTL").expect("MTL's agent");
    let believed = stats.probe_tables_accepted.load(std::sync::atomic::Ordering::Relaxed);
    let contradicted = stats.probe_tables_contradicted.load(std::sync::atomic::Ordering::Relaxed);
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert!(out.status.success(), "failed checks: {}", report["failed"]);
    assert_eq!(report["failed"], serde_json::json!([]));
    assert_eq!(report["beacons"].as_object().map(|b| b.len()), Some(3), "{report}");
    assert_eq!(report["joined_site"], "MTL", "{report}");
    // Its table (MTL's beacon 10 ms away, as its gateway) agrees with the RTT the gateway
    // measures.
    assert_eq!((believed, contradicted), (1, 0), "the JoinMeasured table was checked and believed");
}
