//! The `horizon` binary as a user runs it.

#![allow(clippy::unwrap_used)] // Tests fail loudly on purpose.

use std::path::PathBuf;
use std::process::Command;

fn horizon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_horizon"))
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
    assert!(text.contains("move     b1 PAR -> MTL: m1 m2 m3 p1 (gain)"), "{text}");
    assert!(text.contains("ticks in"), "{text}");
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
