//! `horizon`: the one binary. Everything is in the library (`lib.rs`).

fn main() -> std::process::ExitCode {
    horizon::main()
}
