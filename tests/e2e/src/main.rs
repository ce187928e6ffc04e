//! The `horizon` binary, built in this package so its tests get its path from Cargo
//! (`CARGO_BIN_EXE_horizon-under-test`): the same [`horizon::main`] as `crates/horizon`'s.

fn main() -> std::process::ExitCode {
    horizon::main()
}
