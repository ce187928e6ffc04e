//! The configuration reference, generated from the code and kept true by tests.
//!
//! Each daemon lists its keys as [`Key`]s (`horizon_core`'s and `horizon_agent`'s
//! `config/keys.rs`); `horizon config-reference` renders them ([`table`]) into
//! docs/configuration.md, and a test keeps the page equal to that output. Each daemon's tests
//! check its list against its parser two ways:
//! - the keys: those its configuration accepts, read from the code ([`accepted_keys`]), are
//!   exactly those listed;
//! - every key's default, through the daemon's own parser and its environment overrides
//!   ([`check_defaults`]): a key said to be required is refused when left out, and a key whose
//!   default is a value gives the very same configuration when that value is set explicitly,
//!   as `HORIZON_CONFIG__<TABLE>__<KEY>` (so the variable's name is checked too).

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;

/// The key a probe uses: no configuration has it.
const PROBE: &str = "__probe__";

/// The keys of the table `T` reads, as serde lists them when it meets a key it does not know
/// ("unknown field `__probe__`, expected one of `a`, `b`"). `within` is the TOML path, if
/// any, of a table nested in `T` to probe instead (`"weights"`: the keys of `[weights]`).
pub fn accepted_keys<T: DeserializeOwned>(within: &str) -> Vec<String> {
    let text = match within {
        "" => format!("{PROBE} = 1"),
        table => format!("[{table}]\n{PROBE} = 1"),
    };
    let Err(e) = toml::from_str::<T>(&text) else {
        panic!("{within:?}: the probe key was accepted: the table takes any key");
    };
    let message = e.to_string();
    let Some((_, expected)) = message.split_once("expected") else {
        panic!("{within:?}: no list of keys in {message:?}");
    };
    let line = expected.lines().next().unwrap_or_default();
    line.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// One key of a daemon's configuration file, as the reference gives it (Markdown cells).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// Its TOML path (`thresholds.cap_ms`; `zones.min` for `min` in each `[[zones]]`).
    pub key: &'static str,
    /// What its value is, in words (`ms`, `ip:port`, `` `file`, `etcd` ``).
    pub ty: &'static str,
    /// `required`; a value (`180`, `` `file` ``), checked against the parser; or words
    /// (`none`, "the core site's name", another key in backquotes), not checked.
    pub default: &'static str,
    /// What it does.
    pub what: &'static str,
}

/// The Markdown table of `keys`: key, type, default, environment variable, what it does. Keys
/// under `arrays` (tables of arrays of tables, `["zones"]`) have no variable.
pub fn table(keys: &[Key], arrays: &[&str]) -> String {
    let mut out = String::from(
        "| key | type | default | environment | what it does |\n|---|---|---|---|---|\n",
    );
    for key in keys {
        let top = key.key.split('.').next().unwrap_or_default();
        let env = if arrays.contains(&top) {
            "—".to_owned()
        } else {
            format!("`{}`", variable(key.key))
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {env} | {} |\n",
            key.key, key.ty, key.default, key.what
        ));
    }
    out
}

/// Problems of a list of keys that no parser check would see: a key listed twice, or a cell
/// that would break the table (a `|` or a line break in it) or leaves it blank (only what a key
/// does may be, continuing the row above), one line each.
pub fn malformed(keys: &[Key]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for key in keys {
        if !seen.insert(key.key) {
            problems.push(format!("{}: listed twice", key.key));
        }
        for cell in [key.key, key.ty, key.default, key.what] {
            if cell.contains('|') || cell.contains('\n') {
                problems.push(format!("{}: the cell {cell:?} breaks the table", key.key));
            }
        }
        if key.key.is_empty() || key.ty.is_empty() || key.default.is_empty() {
            problems
                .push(format!("{:?}: a key, its type and its default are never empty", key.key));
        }
    }
    problems
}

/// How a row's default was checked against the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// `required`: the configuration without the key is refused, naming it.
    Required,
    /// A value: set explicitly (through its environment variable), it changes nothing.
    Value,
    /// Words, not a value (`none`, "the core site's name", `listen.transfer`…), or a key of an
    /// array of tables (`[[zones]]`), which no variable can set: only the key is checked.
    Words,
}

/// The value a default cell stands for, as the environment variable would carry it: a number,
/// `true`/`false`, an array, or a word in backquotes (`` `file` ``: a string). `None`: words.
fn default_value(cell: &str) -> Option<String> {
    let quoted =
        cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')).filter(|c| !c.contains('`'));
    let plain = quoted.unwrap_or(cell);
    if !plain.is_empty() && format!("v = {plain}").parse::<toml::Table>().is_ok() {
        return Some(plain.to_owned());
    }
    // A word in backquotes is a string (`file`), unless it names another key (`listen.admin`).
    quoted.filter(|w| !w.contains(' ') && !w.contains('.')).map(str::to_owned)
}

/// The environment variable that sets `key` (`servers.warm_pool`:
/// `HORIZON_CONFIG__SERVERS__WARM_POOL`).
pub fn variable(key: &str) -> String {
    let path: Vec<String> = key.split('.').map(str::to_ascii_uppercase).collect();
    format!("{}{}", crate::overrides::PREFIX, path.join("__"))
}

/// Checks every row's default against the daemon's parser (`parse`: a configuration's text to
/// its parsed form, compared as `Debug`, or its errors). `minimal` is a configuration holding
/// the required keys and nothing else; `arrays` the tables that are arrays of tables
/// (`["zones"]`). Returns how each row was checked, or what disagrees, one line per row.
pub fn check_defaults<C: std::fmt::Debug>(
    rows: &[Key],
    minimal: &str,
    arrays: &[&str],
    parse: impl Fn(&str) -> Result<C, Vec<String>>,
) -> Result<Vec<(String, Checked)>, Vec<String>> {
    let base = match parse(minimal) {
        Ok(config) => format!("{config:?}"),
        Err(e) => return Err(vec![format!("the minimal configuration is refused: {e:?}")]),
    };
    let doc: toml::Table = minimal.parse().expect("the minimal configuration is TOML");
    let mut problems = Vec::new();
    let mut checked = Vec::new();
    for row in rows {
        let path: Vec<&str> = row.key.split('.').collect();
        let array = arrays.contains(&path[0]);
        let how = if row.default == "required" && !array {
            let mut without = doc.clone();
            if !remove(&mut without, &path) {
                problems.push(format!(
                    "{}: said to be required, but the minimal configuration does not set it",
                    row.key
                ));
                continue;
            }
            let text = toml::to_string(&without).expect("a table prints");
            let leaf = path[path.len() - 1];
            match parse(&text) {
                Ok(_) => problems.push(format!(
                    "{}: said to be required, but a configuration without it is taken",
                    row.key
                )),
                Err(e) if !e.iter().any(|m| m.contains(leaf)) => problems.push(format!(
                    "{}: left out, the configuration is refused without naming it: {e:?}",
                    row.key
                )),
                Err(_) => {}
            }
            Checked::Required
        } else if let (Some(value), false) = (default_value(row.default), array) {
            let name = variable(row.key);
            let text = match crate::overrides::apply(minimal, [(name.clone(), value.clone())]) {
                Ok(text) => text,
                Err(e) => {
                    problems.push(format!("{}: {name}={value} is refused: {e:?}", row.key));
                    continue;
                }
            };
            match parse(&text) {
                Ok(config) if format!("{config:?}") == base => {}
                Ok(_) => problems.push(format!(
                    "{}: the page says its default is {}, but {name}={value} changes the configuration",
                    row.key, row.default
                )),
                Err(e) => problems.push(format!("{}: {name}={value} is refused: {e:?}", row.key)),
            }
            Checked::Value
        } else {
            Checked::Words
        };
        checked.push((row.key.to_owned(), how));
    }
    if problems.is_empty() { Ok(checked) } else { Err(problems) }
}

/// [`check_defaults`] over groups of rows, each against its own minimal configuration (keys read
/// only in some mode: `[servers.kubernetes]` with its driver); panics naming every row that
/// disagrees. Returns how each row was checked.
pub fn assert_defaults<C: std::fmt::Debug>(
    groups: &[(Vec<Key>, &str)],
    arrays: &[&str],
    parse: impl Fn(&str) -> Result<C, Vec<String>>,
) -> Vec<(String, Checked)> {
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    for (rows, minimal) in groups {
        match check_defaults(rows, minimal, arrays, &parse) {
            Ok(rows) => checked.extend(rows),
            Err(p) => problems.extend(p),
        }
    }
    assert!(
        problems.is_empty(),
        "the configuration reference disagrees with the parser:\n{}",
        problems.join("\n")
    );
    checked
}

/// Removes the key at `path` from `table`; whether it was there.
fn remove(table: &mut toml::Table, path: &[&str]) -> bool {
    match path {
        [] => false,
        [last] => table.remove(*last).is_some(),
        [key, rest @ ..] => match table.get_mut(*key) {
            Some(toml::Value::Table(t)) => remove(t, rest),
            _ => false,
        },
    }
}

/// `keys` under `prefix` (`"listen"`: `listen.control`, …).
pub fn under(prefix: &str, keys: Vec<String>) -> impl Iterator<Item = String> + '_ {
    keys.into_iter().map(move |k| format!("{prefix}.{k}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        a: u32,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        b: u32,
        c: u32,
    }

    /// A toy daemon: `a` is required, `b` defaults to 3, `[t] c` to "x".
    fn parse_toy(text: &str) -> Result<(u32, u32, String), Vec<String>> {
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| vec![e.to_string()])?;
        let int = |v: Option<&toml::Value>| v.and_then(toml::Value::as_integer).map(|i| i as u32);
        let a = int(doc.get("a")).ok_or_else(|| vec!["a is required".to_owned()])?;
        let c = doc.get("t").and_then(|t| t.get("c")).and_then(toml::Value::as_str);
        Ok((a, int(doc.get("b")).unwrap_or(3), c.unwrap_or("x").to_owned()))
    }

    fn row(key: &'static str, default: &'static str) -> Key {
        Key { key, ty: "n", default, what: "" }
    }

    #[test]
    fn a_default_the_page_gives_is_checked_through_the_parser_and_its_variable() {
        let rows = [row("a", "required"), row("b", "3"), row("t.c", "`x`"), row("d", "none")];
        let checked = check_defaults(&rows, "a = 1", &[], parse_toy).expect("the page agrees");
        let how: Vec<Checked> = checked.into_iter().map(|(_, h)| h).collect();
        assert_eq!(how, [Checked::Required, Checked::Value, Checked::Value, Checked::Words]);
        // A wrong default, a required key that is not, and a wrong string are each named.
        let rows = [row("b", "4"), row("t.c", "`y`")];
        let problems = check_defaults(&rows, "a = 1", &[], parse_toy).expect_err("disagrees");
        assert!(
            problems[0].starts_with("b: the page says its default is 4, but HORIZON_CONFIG__B=4")
        );
        assert!(problems[1].contains("HORIZON_CONFIG__T__C=y changes the configuration"));
        let rows = [row("b", "required")];
        let problems = check_defaults(&rows, "a = 1\nb = 3", &[], parse_toy).expect_err("taken");
        assert!(problems[0].contains("a configuration without it is taken"), "{problems:?}");
        // Words in backquotes that name another key, and prose, are not values.
        assert_eq!(default_value("`listen.admin`"), None);
        assert_eq!(default_value("the whole world"), None);
        assert_eq!(default_value("`[\"gameserver\"]`").as_deref(), Some("[\"gameserver\"]"));
        assert_eq!(default_value("0.05").as_deref(), Some("0.05"));
        assert_eq!(default_value("`/horizon`").as_deref(), Some("/horizon"));
    }

    #[test]
    fn keys_are_read_from_the_code() {
        assert_eq!(accepted_keys::<Outer>(""), ["a", "inner"]);
        assert_eq!(accepted_keys::<Outer>("inner"), ["b", "c"]);
    }

    #[test]
    fn the_table_names_each_keys_variable_and_refuses_what_would_break_it() {
        let keys = [
            Key { key: "a", ty: "n", default: "required", what: "an `a`" },
            Key { key: "zones.min", ty: "`[x, y, z]`", default: "required", what: "" },
        ];
        assert_eq!(
            table(&keys, &["zones"]),
            "| key | type | default | environment | what it does |\n|---|---|---|---|---|\n\
             | `a` | n | required | `HORIZON_CONFIG__A` | an `a` |\n\
             | `zones.min` | `[x, y, z]` | required | — |  |\n"
        );
        assert!(malformed(&keys).is_empty());
        let bad = [keys[0], keys[0], Key { key: "b", ty: "x | y", default: "", what: "z" }];
        assert_eq!(
            malformed(&bad),
            [
                "a: listed twice",
                "b: the cell \"x | y\" breaks the table",
                "\"b\": a key, its type and its default are never empty"
            ]
        );
    }
}
