//! Configuration values from the environment, over the daemons' TOML files (what a container
//! platform sets most easily): `HORIZON_CONFIG__<KEY>__<KEY>=value` sets the key at that path,
//! `__` separating tables, case-insensitive (`HORIZON_CONFIG__SERVERS__WARM_POOL=4`,
//! `HORIZON_CONFIG__CORE=horizon-core:7400`). The value is read as TOML (a number, a boolean,
//! an array, a quoted string), else taken as a string. A key the daemon does not know is refused
//! by its parser like one in the file.

/// The variables' prefix.
pub const PREFIX: &str = "HORIZON_CONFIG__";

/// `text` with every override of `vars` applied, or why not (one line each).
pub fn apply(
    text: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<String, Vec<String>> {
    let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| vec![e.to_string()])?;
    let mut errors = Vec::new();
    let mut any = false;
    let mut vars: Vec<(String, String)> =
        vars.into_iter().filter(|(k, _)| k.starts_with(PREFIX)).collect();
    vars.sort();
    for (name, raw) in vars {
        let path: Vec<String> =
            name[PREFIX.len()..].split("__").map(|k| k.to_ascii_lowercase()).collect();
        if path.iter().any(String::is_empty) {
            errors.push(format!("{name}: an empty key in the path"));
            continue;
        }
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.clone()));
        match set(&mut doc, &path, value) {
            Ok(()) => any = true,
            Err(key) => errors.push(format!("{name}: `{key}` is a value, not a table")),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if !any {
        return Ok(text.to_owned());
    }
    toml::to_string(&doc).map_err(|e| vec![e.to_string()])
}

/// Sets `value` at `path` in `table`, making the tables on the way; `Err(key)` if a key on the
/// way holds a value.
fn set(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    match path {
        [] => Ok(()),
        [last] => {
            table.insert(last.clone(), value);
            Ok(())
        }
        [key, rest @ ..] => {
            let next =
                table.entry(key.clone()).or_insert_with(|| toml::Value::Table(Default::default()));
            match next {
                toml::Value::Table(t) => set(t, rest, value),
                _ => Err(key.clone()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn overrides_set_values_at_their_path_typed_as_toml() {
        let text = "core = \"10.0.0.1:7400\"\n[servers]\nwarm_pool = 2\n";
        let out = apply(
            text,
            vars(&[
                ("HORIZON_CONFIG__CORE", "horizon-core:7400"),
                ("HORIZON_CONFIG__SERVERS__WARM_POOL", "4"),
                ("HORIZON_CONFIG__LISTEN__ADMIN", "\"0.0.0.0:7414\""),
                ("HORIZON_SERVER_TOKEN", "not a config value"),
            ]),
        )
        .unwrap();
        let t: toml::Table = out.parse().unwrap();
        assert_eq!(t["core"].as_str(), Some("horizon-core:7400"));
        assert_eq!(t["servers"]["warm_pool"].as_integer(), Some(4));
        assert_eq!(t["listen"]["admin"].as_str(), Some("0.0.0.0:7414"));
        assert!(!out.contains("not a config value"));
    }

    #[test]
    fn a_path_through_a_value_is_refused_by_name() {
        let errors = apply("core = \"x:1\"\n", vars(&[("HORIZON_CONFIG__CORE__X", "1")]));
        assert!(errors.unwrap_err()[0].contains("HORIZON_CONFIG__CORE__X"));
    }
}
