//! The reference game's Godot project (`godot/reference`), built into the binary so that
//! `horizon demo --game-server godot` runs from anywhere.

use std::path::Path;

/// Every file of the project, by path inside it.
pub const FILES: &[(&str, &str)] = &[
    ("project.godot", include_str!("../../../godot/reference/project.godot")),
    ("main.tscn", include_str!("../../../godot/reference/main.tscn")),
    ("reference_game.gd", include_str!("../../../godot/reference/reference_game.gd")),
    ("postcard.gd", include_str!("../../../godot/reference/postcard.gd")),
    (
        "addons/horizon/horizon.gd",
        include_str!("../../../godot/reference/addons/horizon/horizon.gd"),
    ),
    (
        "addons/horizon/plugin.cfg",
        include_str!("../../../godot/reference/addons/horizon/plugin.cfg"),
    ),
    ("addons/horizon/plugin.gd", include_str!("../../../godot/reference/addons/horizon/plugin.gd")),
];

/// Writes the project into `dir` (created if missing; its files replaced).
pub fn write_project(dir: &Path) -> std::io::Result<()> {
    for (path, text) in FILES {
        let to = dir.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(to, text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_file_of_the_project_is_built_in() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../godot/reference");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&root).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut built_in: Vec<String> = super::FILES.iter().map(|(p, _)| (*p).to_owned()).collect();
        built_in.sort();
        assert_eq!(on_disk, built_in, "godot/reference and reference.rs disagree");
    }
}
