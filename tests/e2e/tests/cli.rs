//! The `horizon` binary as a user runs it.

#![allow(clippy::unwrap_used)] // Tests fail loudly on purpose.

use std::path::PathBuf;
use std::process::Command;

fn horizon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_horizon-under-test"))
}

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../simulations/scenarios").join(name)
}

#[test]
fn sim_run_json_prints_one_document() {
    let out = horizon()
        .args(["sim", "run", "--json"])
        .arg(scenario("three-mtl-one-par.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["moves"][0]["to"], "MTL");
    assert_eq!(v["final"]["p1"]["site"], "MTL");
}

#[test]
fn sim_run_prints_a_readable_timeline() {
    let out =
        horizon().args(["sim", "run"]).arg(scenario("three-mtl-one-par.toml")).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("create   b1 on MTL for m1 m2 m3 p1 (carve)"), "{text}");
    assert!(text.contains("35.0s  PAR -> MTL  (carve)  m1 m2 m3 p1"), "{text}");
    assert!(text.contains("ticks in"), "{text}");
}

#[test]
fn sim_run_explain_says_why_each_bubble_is_where_it_is_when_that_changes() {
    let out = horizon()
        .args(["sim", "run", "--explain"])
        .arg(scenario("three-mtl-one-par.toml"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let explains: Vec<&str> = text.lines().filter(|l| l.contains(" explain ")).collect();
    // The Parisian plays in PAR's zone; the Montrealers join them and the group counts the
    // dwell before its bubble is carved out for MTL; then the bubble stays.
    let expected = [
        "[     5.0s] explain  p1 in the zones: The group of player 1 (4 players) plays better on MTL than in PAR's zones by 42.5 ms per player: a bubble is carved out for it on MTL once MTL has been best for 30 s (dwell 0 s so far).",
        "[    35.0s] explain  b1 on MTL: MTL is the best site for its 4 counted players: it stays.",
    ];
    assert_eq!(explains.len(), expected.len(), "{text}");
    for (line, want) in explains.iter().zip(expected) {
        assert!(line.starts_with(want), "{line}\nshould start with\n{want}");
    }
    // Without the flag, no such line.
    let plain =
        horizon().args(["sim", "run"]).arg(scenario("three-mtl-one-par.toml")).output().unwrap();
    assert!(!String::from_utf8(plain.stdout).unwrap().contains(" explain "));
}

#[test]
fn a_bad_file_exits_64_and_names_the_key() {
    let dir = std::env::temp_dir().join(format!("horizon-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\nduration_s = 60\n[sites]\ncore = \"PAR\"\nlist = [\"PAR\"]\n\
         [[players]]\nid = \"a\"\nhome = \"NYC\"\naccess_rtt_ms = 5\n",
    )
    .unwrap();
    let out = horizon().args(["sim", "run"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.toml") && err.contains("players[0].home"), "{err}");
    let missing = horizon().args(["sim", "run", "/nonexistent/x.toml"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(64));
}

#[test]
fn a_bad_drill_exits_64_before_anything_starts_naming_each_fault() {
    let dir = temp_dir("drill");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("drill.toml");
    std::fs::write(
        &bad,
        "[[fault]]\nat_s = 5\nkind = \"partition\"\nsite = \"SYD\"\nfor_s = 10\n\
         [[fault]]\nat_s = 9\nkind = \"restart_agent\"\nsite = \"MTL\"\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out =
        horizon().args(["demo", "--admin", "127.0.0.1:0", "--faults"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("fault 1 (partition)") && err.contains("SYD"), "{err}");
    assert!(err.contains("fault 2 (restart_agent): needs `for_s`"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "refused before the mesh started"
    );
    let bundled = concat!(env!("CARGO_MANIFEST_DIR"), "/../../simulations/drills/failures.toml");
    assert!(std::path::Path::new(bundled).exists());
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("horizon-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `horizon certs ARGS… --dir DIR`.
fn certs(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    horizon().arg("certs").args(args).arg("--dir").arg(dir).output().unwrap()
}

#[test]
fn certs_init_writes_a_ca_and_site_certificates_and_refuses_to_overwrite() {
    use std::os::unix::fs::PermissionsExt;

    let dir = temp_dir("certs");
    let out = certs(&dir, &["init", "--sites", "PAR,MTL"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["ca.pem", "ca.key", "PAR.pem", "PAR.key", "MTL.pem", "MTL.key"] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    for key in ["ca.key", "PAR.key"] {
        let mode = std::fs::metadata(dir.join(key)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{key} is readable by others");
    }
    let again = certs(&dir, &["init", "--sites", "PAR"]);
    assert_eq!(again.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let add = certs(&dir, &["add", "--site", "HKG"]);
    assert!(add.status.success(), "{}", String::from_utf8_lossy(&add.stderr));
    assert!(dir.join("HKG.pem").exists());
    let bad = certs(&dir, &["add", "--site", "PAR-2"]);
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("PAR-2"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn netem_delays_packets_and_obeys_commands_on_stdin() {
    use std::io::{BufRead, BufReader, Write};
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    // Kept from every other test until the emulator binds it.
    let reserved = horizon_testkit::ReservedPort::new().unwrap();
    let port = reserved.addr().port();
    let mut child = horizon()
        .args(["netem", "--delay-ms", "40", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--upstream", &upstream_addr.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("forward 40.0"), "{line}");

    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    upstream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let started = Instant::now();
    client.send_to(b"ping", ("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 16];
    let (n, via) = upstream.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    upstream.send_to(b"pong", via).unwrap();
    let n = client.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"pong");
    assert!(started.elapsed() >= Duration::from_millis(80), "round trip {:?}", started.elapsed());

    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "partition on").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("partition on"), "{line}");
    client.send_to(b"lost", ("127.0.0.1", port)).unwrap();
    upstream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(upstream.recv_from(&mut buf).is_err(), "a packet crossed the partition");
    writeln!(stdin, "delay fast").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("error:") && line.contains("fast"), "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn sim_population_writes_the_report_and_prints_json() {
    let dir = std::env::temp_dir().join(format!("horizon-pop-{}", std::process::id()));
    let out = horizon()
        .args(["sim", "population", "--players", "150", "--hours", "0.25", "--seed", "9"])
        .args(["--json", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["seed"], 9);
    assert_eq!(v["players"], 150);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("seed 9"), "the seed is printed: {stderr}");
    for f in ["report.md", "report.json", "latency.svg", "bubbles.svg", "online.svg"] {
        assert!(dir.join(f).is_file(), "{f} not written");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sim_population_and_measure_refuse_bad_input_with_exit_64() {
    let out = horizon().args(["sim", "population", "--players", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--players"));
    let out = horizon().args(["sim", "population"]).arg(scenario("tour.toml")).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let csv = std::env::temp_dir().join(format!("horizon-rtt-{}.csv", std::process::id()));
    std::fs::write(&csv, "player,site,rtt_ms\nm1,PAR,95\nm1,MTL,10\nm2,MTL,oops\n").unwrap();
    let out = horizon().args(["sim", "measure", "--core", "PAR"]).arg(&csv).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 4"));
    std::fs::write(&csv, "player,site,rtt_ms\nm1,PAR,95\nm1,MTL,10\n").unwrap();
    let out = horizon().args(["sim", "measure", "--core", "PAR"]).arg(&csv).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 players (100.0 %) would gain"));
    std::fs::remove_file(&csv).unwrap();
}

/// Game-server processes whose command line names `dir` (the demo passes its CA path).
fn servers_under(dir: &std::path::Path) -> usize {
    let out = Command::new("pgrep")
        .args(["-f", &format!("gameserver.*{}", dir.display())])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Starts the demo, waits for its first summary (servers ready, players playing), sends it
/// `signal`, and checks it stops within 10 s with exit 0 and nothing of it left running.
fn signal_stops_the_demo(signal: &str, said: &str, driver: &str) {
    use std::io::{BufRead, BufReader};
    let dir =
        std::env::temp_dir().join(format!("horizon-{signal}-{driver}-{}", std::process::id()));
    let mut demo = horizon()
        .args(["demo", "--admin", "127.0.0.1:0", "--driver", driver, "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    // The first summary line comes once the servers are ready and the players started.
    let first = lines.find(|l| l.as_ref().is_ok_and(|l| l.starts_with("t="))).unwrap().unwrap();
    assert!(servers_under(&dir) >= 6, "game servers running: {first}");
    let pid = demo.id().to_string();
    let sent = std::time::Instant::now();
    assert!(Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = demo.wait().unwrap();
    let took = sent.elapsed();
    assert!(status.success(), "{status:?}: {rest:?}");
    assert!(took < std::time::Duration::from_secs(10), "stopped in {took:?}");
    assert!(rest.iter().any(|l| l.starts_with(said)), "{rest:?}");
    assert!(rest.iter().any(|l| l.starts_with("final:")), "{rest:?}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(servers_under(&dir), 0, "no game server left running");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_stops_the_demo_and_leaves_nothing_running() {
    signal_stops_the_demo("INT", "Ctrl-C", "process");
}

#[test]
fn sigterm_stops_the_demo_within_10_s_and_leaves_nothing_running() {
    signal_stops_the_demo("TERM", "SIGTERM", "process");
}

#[test]
fn a_hang_up_stops_the_demo_too() {
    // Its daemons take SIGHUP as a reload: the demo itself must still end with its terminal.
    signal_stops_the_demo("HUP", "SIGHUP", "process");
}

#[test]
fn sigterm_stops_the_demo_on_kubernetes_and_leaves_no_pod_process_running() {
    signal_stops_the_demo("TERM", "SIGTERM", "kube");
}

#[test]
fn a_game_server_started_with_exit_with_parent_dies_with_its_parent() {
    let dir = temp_dir("pdeath");
    assert!(certs(&dir, &["init", "--sites", "PAR"]).status.success());
    // A shell starts the server in the background, then is killed: the server follows it.
    let bin = env!("CARGO_BIN_EXE_horizon-under-test");
    let script = format!(
        "HORIZON_SERVER_TOKEN=t {bin} gameserver --agent 127.0.0.1:9 --site PAR --name pd-0 \
         --ca {} --orphan-exit-s 0 --exit-with-parent & echo $!; sleep 30",
        dir.join("ca.pem").display()
    );
    let mut sh = Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(sh.stdout.take().unwrap());
    let mut pid = String::new();
    out.read_line(&mut pid).unwrap();
    let pid = pid.trim().to_owned();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Running, not a zombie waiting for whoever adopted it to reap it.
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|rest| !rest.starts_with('Z')))
    };
    assert!(alive(&pid), "the server runs while its parent does");
    sh.kill().unwrap();
    let _ = sh.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive(&pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let outlived = alive(&pid);
    if outlived {
        let _ = Command::new("kill").args(["-9", &pid]).status();
    }
    assert!(!outlived, "the server outlived its parent");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_game_server_whose_agent_is_gone_exits_instead_of_living_on() {
    let dir = temp_dir("orphan");
    assert!(certs(&dir, &["init", "--sites", "PAR"]).status.success());
    let started = std::time::Instant::now();
    // Nothing listens on the agent's address: the server never reaches it.
    let out = horizon()
        .args(["gameserver", "--agent", "127.0.0.1:9", "--site", "PAR", "--name", "par-gs-0"])
        .arg("--ca")
        .arg(dir.join("ca.pem"))
        .args(["--orphan-exit-s", "1"])
        .env("HORIZON_SERVER_TOKEN", "t")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("never outlives its agent"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(!err.contains('\u{1b}'), "no colour codes off a terminal: {err:?}");
    // The same, logged for a collector: one JSON object per line.
    let out = horizon()
        .args(["--log-format", "json", "gameserver", "--agent", "127.0.0.1:9", "--site", "PAR"])
        .args(["--name", "par-gs-0", "--orphan-exit-s", "1", "--ca"])
        .arg(dir.join("ca.pem"))
        .env("HORIZON_SERVER_TOKEN", "t")
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    let line = err.lines().find(|l| l.starts_with('{')).expect("a JSON log line");
    let log: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(log["level"], "ERROR", "{log}");
    assert!(log["fields"]["message"].as_str().unwrap().contains("never outlives its agent"));
}

/// docs/examples copied into a fresh directory with the files its configurations name, made
/// as docs/running.md says: `certs/` (a dev CA for PAR, MTL, HKG and the core) and
/// `certs/player.keys`.
fn examples_with_their_files(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("horizon-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples");
    for entry in std::fs::read_dir(examples).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let make = |args: &[&str], target: &str| {
        let out = horizon().args(args).arg(dir.join(target)).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    make(&["certs", "init", "--sites", "PAR,MTL,HKG", "--dir"], "certs");
    make(&["keys", "init", "--file"], "certs/player.keys");
    dir
}

#[test]
fn check_validates_a_configuration_with_its_environment_overrides() {
    let dir = examples_with_their_files("check-core");
    let core = dir.join("core.toml");
    let core = core.to_str().unwrap();
    let ok = horizon().args(["core", "--check", "--config", core]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // An override sets a value over the file's; a key the core does not know is refused by name.
    let over = horizon()
        .args(["core", "--check", "--config", core])
        .env("HORIZON_CONFIG__TICK_S", "2.5")
        .output()
        .unwrap();
    assert!(over.status.success(), "{}", String::from_utf8_lossy(&over.stderr));
    let typo = horizon()
        .args(["core", "--check", "--config", core])
        .env("HORIZON_CONFIG__TICKS", "2")
        .output()
        .unwrap();
    assert_eq!(typo.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&typo.stderr).contains("unknown field `ticks`"));
    let bad = horizon()
        .args(["core", "--check", "--config", core])
        .env("HORIZON_CONFIG__TICK_S", "-1")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64), "{}", String::from_utf8_lossy(&bad.stderr));
    // TLS to etcd whose CA file is not there: found now, by its key.
    let etcd = horizon()
        .args(["core", "--check", "--config", core])
        .env("HORIZON_CONFIG__STORE__KIND", "etcd")
        .env("HORIZON_CONFIG__STORE__ENDPOINTS", r#"["https://etcd-0:2379"]"#)
        .env("HORIZON_CONFIG__STORE__TLS_CA", "etcd/ca.crt")
        .output()
        .unwrap();
    assert_eq!(etcd.status.code(), Some(64));
    let said = String::from_utf8_lossy(&etcd.stderr);
    assert!(said.contains("store.tls_ca = ") && said.contains("etcd/ca.crt"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_reads_the_certificates_and_keys_a_configuration_names() {
    let dir = examples_with_their_files("check-files");
    let check = |daemon: &str, config: &str| {
        let out = horizon().args([daemon, "--check", "--config"]).arg(dir.join(config)).output();
        let out = out.unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert_eq!(check("agent", "agent-mtl.toml"), (Some(0), String::new()));
    assert_eq!(check("core", "core.toml"), (Some(0), String::new()));
    // What each would find wrong at start (or at a reload) is found now, the file named:
    // another site's certificate, a site's certificate as the core's, a certificate with
    // another's key, no player keys, a certificate from another CA.
    let edit = |config: &str, from: &str, to: &str| {
        let text = std::fs::read_to_string(dir.join(config)).unwrap();
        assert!(text.contains(from), "{config} names {from}");
        std::fs::write(dir.join(format!("edited-{config}")), text.replace(from, to)).unwrap();
    };
    let refused = |daemon: &str, config: &str, from: &str, to: &str, says: &[&str]| {
        edit(config, from, to);
        let (code, err) = check(daemon, &format!("edited-{config}"));
        assert_eq!(code, Some(64), "{from} → {to}: {err}");
        for s in says {
            assert!(err.contains(s), "{from} → {to}: {s:?} in {err}");
        }
    };
    let mtl = "agent-mtl.toml";
    refused(
        "agent",
        mtl,
        "certs/MTL.",
        "certs/PAR.",
        &["PAR.pem", "for site MTL", "not valid for name"],
    );
    refused("agent", mtl, "certs/MTL.key", "certs/PAR.key", &["MTL.pem", "certificate and key"]);
    refused(
        "agent",
        mtl,
        "certs/player.keys",
        "certs/none.keys",
        &["tls.player_keys", "none.keys"],
    );
    refused(
        "core",
        "core.toml",
        "certs/horizon-core.",
        "certs/PAR.",
        &["PAR.pem", "for the core", "not valid for name"],
    );
    refused(
        "core",
        "core.toml",
        "certs/horizon-core.key",
        "certs/PAR.key",
        &["certificate and key"],
    );
    let other = horizon()
        .args(["certs", "init", "--sites", "MTL", "--dir"])
        .arg(dir.join("other"))
        .output();
    assert!(other.unwrap().status.success());
    refused("agent", mtl, "certs/MTL.", "other/MTL.", &["MTL.pem", "invalid peer certificate"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_daemon_whose_files_are_missing_names_every_one_and_exits_64_with_or_without_check() {
    let dir = examples_with_their_files("missing-files");
    let text = std::fs::read_to_string(dir.join("core.toml")).unwrap();
    let edited = text
        .replace("certs/ca.pem", "certs/gone-ca.pem")
        .replace("certs/horizon-core.key", "certs/gone.key");
    std::fs::write(dir.join("gone.toml"), edited).unwrap();
    for check in [true, false] {
        let mut cmd = horizon();
        cmd.arg("core");
        if check {
            cmd.arg("--check");
        }
        let out = cmd.arg("--config").arg(dir.join("gone.toml")).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "--check {check}: {err}");
        assert!(err.contains("tls.ca = ") && err.contains("gone-ca.pem"), "{err}");
        assert!(err.contains("tls.key = ") && err.contains("gone.key"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_reads_the_kubernetes_drivers_pod_template() {
    let files = examples_with_their_files("check-kube");
    let example = files.join("agent-mtl-kube.toml");
    let agent = |config: &std::path::Path| {
        horizon()
            .args(["agent", "--check", "--config"])
            .arg(config)
            .env("HORIZON_SERVER_TOKEN", "t")
            .env_remove("HORIZON_POD_NAME")
            .env_remove("HORIZON_POD_UID")
            .output()
            .unwrap()
    };
    let ok = agent(&example);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // The same configuration beside a template that is not a pod template.
    std::fs::write(
        files.join("pod-template.json"),
        r#"{"spec": {"containers": [{"name": "gs"}]}}"#,
    )
    .unwrap();
    let bad = agent(&example);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(64), "{err}");
    assert!(err.contains("pod-template.json") && err.contains("has no image"), "{err}");
    let _ = std::fs::remove_dir_all(&files);
}

#[test]
fn keys_init_rotate_and_sign_player_tokens_that_verify() {
    use horizon_transport::Keyring;
    use horizon_transport::credential::Kind;
    let dir = std::env::temp_dir().join(format!("horizon-cli-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("player.keys");
    let _ = std::fs::remove_file(&file);
    let run =
        |args: &[&str]| horizon().arg("keys").args(args).arg("--file").arg(&file).output().unwrap();
    let init = run(&["init"]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let again = run(&["init"]);
    assert_eq!(again.status.code(), Some(64), "an existing key file is not replaced");
    let token = |account: &str| {
        let out = run(&["player-token", "--account", account]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let before = token("alice");
    let rotate = run(&["rotate", "--id", "k2"]);
    assert!(rotate.status.success(), "{}", String::from_utf8_lossy(&rotate.stderr));
    let after = token("alice");
    let keys = Keyring::load(&file).unwrap();
    assert_eq!(keys.signing_id(), "k2");
    let now = std::time::SystemTime::now();
    for t in [&before, &after] {
        assert_eq!(keys.verify(t, Kind::Player, now).unwrap(), "alice");
    }
    assert!(after.contains(".k2."), "the new key signs: {after}");
    let bad = run(&["player-token", "--account", "not.an.account"]);
    assert_eq!(bad.status.code(), Some(64));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_agent_reloads_its_credentials_on_sighup_and_keeps_the_old_ones_when_the_new_are_wrong() {
    use std::io::{BufRead, BufReader};
    let dir = temp_dir("sighup");
    assert!(certs(&dir, &["init", "--sites", "PAR,MTL"]).status.success());
    let keys = dir.join("player.keys");
    let init = horizon().args(["keys", "init", "--file"]).arg(&keys).output().unwrap();
    assert!(init.status.success());
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        "site = \"MTL\"\ncore = \"127.0.0.1:9\"\ncore_site = \"PAR\"\n\
         [listen]\nservers = \"127.0.0.1:0\"\nplayers = \"127.0.0.1:0\"\ntransfer = \"127.0.0.1:0\"\n\
         advertise_transfer = \"127.0.0.1:1\"\n\
         [tls]\nca = \"ca.pem\"\ncert = \"MTL.pem\"\nkey = \"MTL.key\"\nplayer_keys = \"player.keys\"\n\
         [servers]\nwarm_pool = 0\n",
    )
    .unwrap();
    let mut agent = horizon()
        .args(["agent", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(agent.stdout.take().unwrap()).lines();
    let serving = stdout.next();
    assert!(serving.is_some_and(|l| l.is_ok_and(|l| l.contains("serving"))), "the agent started");
    // Read on (a closed pipe would fail the agent's last words).
    std::thread::spawn(move || stdout.for_each(drop));
    let (tx, logs) = std::sync::mpsc::channel();
    let stderr = agent.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let pid = agent.id().to_string();
    let hup = || assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let until = |needle: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match logs.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        None
    };
    hup();
    let reloaded = until("player keys reloaded");
    // A key file that does not load: said, and the agent runs on with what it had.
    std::fs::write(&keys, "k1 c2hvcnQ\n").unwrap();
    hup();
    let failed = until("reload failed");
    // Good keys again, but another site's certificate put in MTL's place: refused too.
    let init = horizon().args(["keys", "init", "--force", "--file"]).arg(&keys).output().unwrap();
    assert!(init.status.success());
    for ext in ["pem", "key"] {
        std::fs::copy(dir.join(format!("PAR.{ext}")), dir.join(format!("MTL.{ext}"))).unwrap();
    }
    hup();
    let foreign = until("reload failed");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let alive = agent.try_wait().unwrap().is_none();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = agent.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let reloaded = reloaded.expect("SIGHUP reloads");
    assert!(reloaded.contains("SIGHUP"), "{reloaded}");
    let failed = failed.expect("a bad key file is said");
    assert!(failed.contains("too short"), "{failed}");
    let foreign = foreign.expect("another site's certificate is said");
    assert!(foreign.contains("not a certificate for site MTL"), "{foreign}");
    assert!(alive, "SIGHUP does not stop an agent");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_bad_option_or_value_exits_64_and_help_exits_0() {
    let out = horizon().args(["sim", "chaos", "--stage", "everywhere"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"everywhere\" is not a stage (measure, relay, fixed, dynamic)"),
        "{err}"
    );
    let out = horizon().args(["sim", "chaos", "--stage", "measure"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run --stage relay"));
    let out = horizon().args(["demo", "--no-such-option"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = horizon().args(["sim", "chaos", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--stage"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_measures_each_sites_beacon_and_names_the_nearest() {
    use horizon_transport::netem::{Netem, NetemConfig};
    use std::sync::Arc;
    use std::time::Duration;
    let beacon = || async {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let stats = Arc::new(horizon_agent::AgentStats::default());
        let (stop, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(horizon_agent::beacon::serve(socket, stats.clone(), rx));
        (addr, stats, stop)
    };
    let (near, _, _stop_near) = beacon().await;
    let (far, far_stats, _stop_far) = beacon().await;
    // 80 ms of round trip in front of the far site's beacon.
    let wan = Netem::start(NetemConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        far,
        Duration::from_millis(80),
    ))
    .await
    .unwrap();
    // Nothing answers there.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let args = [
        "probe".to_owned(),
        format!("PAR={}", wan.local_addr()),
        format!("MTL={near}"),
        format!("HKG={}", silent.local_addr().unwrap()),
        "--samples".into(),
        "5".into(),
        "--timeout-ms".into(),
        "1000".into(),
        "--json".into(),
    ];
    let out =
        tokio::task::spawn_blocking(move || horizon().args(args).output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nearest"], "MTL", "{v}");
    let site = |i: usize| &v["sites"][i];
    assert_eq!(site(0)["site"], "PAR");
    let par = site(0)["median_ms"].as_f64().expect("PAR answered");
    let mtl = site(1)["median_ms"].as_f64().expect("MTL answered");
    // The emulated round trip is a floor: nothing arrives sooner.
    assert!(par >= 80.0 && mtl < par, "PAR {par} ms, MTL {mtl} ms");
    assert_eq!(site(0)["loss"], 0.0);
    assert_eq!(site(2)["loss"], 1.0, "HKG never answered: {v}");
    assert!(site(2)["median_ms"].is_null());
    assert_eq!(far_stats.beacon_pongs.load(std::sync::atomic::Ordering::Relaxed), 5);
}

#[test]
fn probe_refuses_a_beacon_that_is_not_site_equals_address() {
    let out = horizon().args(["probe", "PAR"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SITE=HOST:PORT"));
}

#[test]
fn config_reference_prints_docs_configuration_md() {
    let out = horizon().arg("config-reference").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), page);
    // An argument it does not take is a usage error.
    let out = horizon().args(["config-reference", "--core"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}
