//! What keeps docs/configuration.md current: the keys a daemon's configuration accepts, read
//! from the code, and the keys the page lists. Each daemon's tests compare the two.

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

/// The keys a section of the page lists: the first column of its tables, in backquotes, from
/// the line `heading` to the next `## ` heading.
pub fn documented_keys(page: &str, heading: &str) -> BTreeSet<String> {
    let Some(start) = page.lines().position(|l| l == heading) else {
        panic!("no section {heading:?} in the page");
    };
    page.lines()
        .skip(start + 1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(key, _)| key.to_owned()))
        .collect()
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

    #[test]
    fn keys_are_read_from_the_code_and_from_the_page() {
        assert_eq!(accepted_keys::<Outer>(""), ["a", "inner"]);
        assert_eq!(accepted_keys::<Outer>("inner"), ["b", "c"]);
        let page = "# x\n\n## One\n\n| key | type |\n|---|---|\n| `a` | n |\n| `inner.b` | n |\n\n## Two\n\n| `z` | n |\n";
        let keys: Vec<String> = documented_keys(page, "## One").into_iter().collect();
        assert_eq!(keys, ["a", "inner.b"]);
    }
}
