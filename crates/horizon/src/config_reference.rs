//! `horizon config-reference`: docs/configuration.md, printed from the keys each daemon lists
//! (`horizon_core::CONFIG_KEYS`, `horizon_agent::CONFIG_KEYS`), which their tests keep equal to
//! what their parsers read and default.

use horizon_admin::reference::table;

/// The page's opening, before the tables.
const INTRO: &str = "# Configuration reference

<!-- Printed by `horizon config-reference` from each daemon's `config/keys.rs`: edit those, then
run `cargo run -p horizon -- config-reference > docs/configuration.md`. -->

Every key of the core's and the agent's TOML configuration files, with its type, its default,
the environment variable that sets it and what it does. Worked examples:
[`examples/core.toml`](examples/core.toml), [`examples/agent-mtl.toml`](examples/agent-mtl.toml).
`horizon core|agent --config FILE --check` reads a file (and the certificates and keys it names)
and prints every problem, each naming its key (exit 64); the daemons do the same at start.

This page is generated from the code: `horizon config-reference` prints it from the list of keys
each daemon keeps beside its parser (`crates/horizon-core/src/config/keys.rs`,
`crates/horizon-agent/src/config/keys.rs`), and tests keep the three in step:
- `the_configuration_page_is_the_one_the_code_prints` (crate `horizon`): this file is exactly
  what the command prints;
- `every_key_the_*_reads_is_in_its_reference` reads the keys the daemon accepts from the code
  (serde's list of a table's fields) and checks its list holds exactly those: a key added to the
  parser and not to the list fails the build;
- `every_default_the_*_reference_gives_is_the_parsers` runs the daemon's own parser on every
  key: a key whose default is `required` is left out of a minimal file and must be refused,
  naming it; a key whose default is a value is set to it through its environment variable and
  must give the very same configuration as leaving it out. So every value default below (27 of
  the core's, 10 of an agent's) and every variable are the code's. Defaults in words (`none`,
  \"the core site's name\", another key) are checked as keys only, as are the keys of `[[zones]]`
  and `[[delegations]]`, which no variable can set.

**From the environment.** `HORIZON_CONFIG__<TABLE>__<KEY>=value` sets a key over the file's, for
either daemon (`__` separates tables; names are case-insensitive): each key's variable is in the
tables. The value is read as TOML (a number, a boolean, an array, a quoted string), else taken
as a string; a name that matches no key is refused like a typo in the file.
Relative paths are relative to the configuration file.
";

/// The whole page.
pub(crate) fn page() -> String {
    format!(
        "{INTRO}\n## The core (`horizon core`)\n\n{}\n## An agent (`horizon agent`)\n\n{}",
        table(horizon_core::CONFIG_KEYS, horizon_core::CONFIG_ARRAYS),
        table(horizon_agent::CONFIG_KEYS, horizon_agent::CONFIG_ARRAYS),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_configuration_page_is_the_one_the_code_prints() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let page = std::fs::read_to_string(path).expect("docs/configuration.md");
        let printed = super::page();
        if page != printed {
            let first = page.lines().zip(printed.lines()).position(|(a, b)| a != b);
            let line = first.unwrap_or(page.lines().count().min(printed.lines().count()));
            panic!(
                "docs/configuration.md is not what `horizon config-reference` prints (first \
                 difference at line {}): run `cargo run -p horizon -- config-reference > \
                 docs/configuration.md`",
                line + 1
            );
        }
    }
}
